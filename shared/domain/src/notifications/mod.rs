//! What an owner is told: the events written with each change (`events`) and their signed webhook deliveries (`webhooks`).

pub mod events;
pub mod webhooks;
