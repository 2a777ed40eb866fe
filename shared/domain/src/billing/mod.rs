//! What a server costs and how it is paid: payments as answered (`payments`), a purchase's
//! checked request (`purchase`), a resize's checks and price (`resize`), the paid order's state machine and its driver (`order`), and
//! each paid transfer followed until the chain calls it final (`finality`).

pub mod finality;
pub mod order;
pub mod payments;
pub mod purchase;
pub mod resize;
