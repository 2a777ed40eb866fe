//! End-to-end and store tests. Run by `make test`, which starts moto's DynamoDB and points
//! `AWS_ENDPOINT_URL_DYNAMODB` at it. Each test has its own table and its own simulator.

mod dynamo_faults;
mod harness;
mod iam;
mod rails;

mod actions;
mod api_keys;
mod approvals;
mod callers;
mod conservation;
mod console;
mod credits_and_deadlines;
mod discovery;
mod docs;
mod doubles_agree_with_the_rails;
mod errors;
mod events;
mod examples;
mod hardening;
mod hostile_world;
mod keys;
mod layers;
mod limits;
mod mcp;
mod openapi;
mod paid_on_the_real_rails;
mod paid_orders_under_faults;
mod paid_time;
mod payments;
mod policies;
mod quotes;
mod ratelimits;
mod sandboxes;
mod scopes;
mod servers;
mod sign_in;
mod sim;
mod simulation;
mod spend_limits;
mod ssh_keys;
mod store;
mod template;
mod upstream;
mod waiting;
mod webhooks;
