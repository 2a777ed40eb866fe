//! What an owner is told: the events written with each change (`events`), its webhook endpoints
//! (`webhooks`) and their signed deliveries (`deliveries`).

pub mod deliveries;
pub mod events;
pub mod webhooks;
