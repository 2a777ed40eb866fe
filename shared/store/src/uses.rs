//! One store call per authenticated request (the cold-start issue, point 2): the credential's
//! own item — `APIKEY#<hash>` / `APIKEY` or `SESSION#<hash>` / `SESSION` — is read and its use
//! recorded in one conditional `UpdateItem` that answers the item as it was (`ALL_OLD`, also on
//! a failed condition: `ReturnValuesOnConditionCheckFailure`), and, when the caller's rate
//! limit is on, counts the request in the caller's fixed window kept on the same item
//! (`rateWindow`: the window's start, epoch seconds; `rateCount`: requests in it).
//!
//! A window's first request sets it (`rateWindow = :w, rateCount = 1` if the stored window is
//! older); the others add to it (`ADD rateCount 1` if `rateWindow = :w`). Which to try first is
//! the caller's guess (the window it last counted in); a wrong guess fails its condition, whose
//! answer carries the item, and the other form is sent: two calls instead of one, on a warm
//! instance only at the first request of a window that another instance opened.

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};

use super::{Item, Store, StoreError, s, schema};

/// The guard of one credential's use, beside its existence: a condition on the record under
/// which its use is recorded (e.g. `attribute_not_exists(revokedAt)`), with the names and
/// values it uses (`#g…`, `:g…`). A record that fails it is answered as it is, uncounted, and
/// unchanged.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    /// The condition expression.
    pub condition: String,
    /// Its `#name` → attribute pairs.
    pub names: Vec<(&'static str, &'static str)>,
    /// Its `:value` → value pairs.
    pub values: Vec<(&'static str, AttributeValue)>,
}

/// A use to record on the credential's item.
#[derive(Debug, Clone)]
pub struct Use<'a> {
    /// The attribute that records the last use (`lastUsedAt`, `lastSeenAt`), set to `now`.
    pub seen_attribute: &'static str,
    /// RFC 3339 UTC.
    pub now: &'a str,
    /// The caller's window start (epoch seconds), or `None` when its rate limit is off.
    pub window: Option<u64>,
    /// Whether to try opening the window first (the caller has not counted in it yet).
    pub open_first: bool,
}

/// What the use found: the item as it was before (`None`: no such credential) and the
/// request's count in its window (`None`: not counted — the limit is off, the guard refused the
/// record, or another instance's clock is in a later window).
#[derive(Debug)]
pub struct Used {
    /// The item before this use.
    pub item: Option<Item>,
    /// This request's number in the window, 1 for the first.
    pub count: Option<u64>,
}

fn number(item: &Item, name: &str) -> Option<u64> {
    item.get(name)?.as_n().ok()?.parse().ok()
}

impl Store {
    /// Records `usage` on the item `pk` / `sk` under `guard` and answers what it was (one
    /// call; a second when the window guess was wrong). See the module docs.
    ///
    /// Errors: the store fails.
    pub async fn use_credential(
        &self,
        pk: String,
        sk: &str,
        guard: &Guard,
        usage: &Use<'_>,
    ) -> Result<Used, StoreError> {
        let mut open = usage.open_first;
        let mut last = None;
        for _ in 0..3 {
            match self.use_once(&pk, sk, guard, usage, open).await? {
                Ok(item) => {
                    let count = usage.window.map(|_| {
                        if open {
                            1
                        } else {
                            number(&item, "rateCount").unwrap_or(0) + 1
                        }
                    });
                    return Ok(Used {
                        item: Some(item),
                        count,
                    });
                }
                Err(None) => {
                    return Ok(Used {
                        item: None,
                        count: None,
                    });
                }
                Err(Some(item)) => {
                    let (Some(window), stored) = (usage.window, number(&item, "rateWindow")) else {
                        return Ok(Used {
                            item: Some(item),
                            count: None,
                        });
                    };
                    let window_held = if open {
                        stored.is_none_or(|w| w < window)
                    } else {
                        stored == Some(window)
                    };
                    // The window held, so the guard refused; or another instance is ahead.
                    if window_held || stored.is_some_and(|w| w > window) {
                        return Ok(Used {
                            item: Some(item),
                            count: None,
                        });
                    }
                    open = !open;
                    last = Some(item);
                }
            }
        }
        Ok(Used {
            item: last,
            count: None,
        })
    }

    /// One conditional `UpdateItem`: `Ok(item before)` when recorded; `Err(Some(item))` when a
    /// condition failed on an existing item; `Err(None)` when there is no item.
    async fn use_once(
        &self,
        pk: &str,
        sk: &str,
        guard: &Guard,
        usage: &Use<'_>,
        open: bool,
    ) -> Result<Result<Item, Option<Item>>, StoreError> {
        let mut condition = String::from("attribute_exists(#pk)");
        if !guard.condition.is_empty() {
            condition.push_str(&format!(" AND ({})", guard.condition));
        }
        let update = match (usage.window, open) {
            (None, _) => "SET #seen = :now",
            (Some(_), true) => {
                condition.push_str(" AND (attribute_not_exists(#rw) OR #rw < :w)");
                "SET #seen = :now, #rw = :w, #rc = :one"
            }
            (Some(_), false) => {
                condition.push_str(" AND #rw = :w");
                "SET #seen = :now ADD #rc :one"
            }
        };
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(schema::PK, s(pk))
            .key(schema::SK, s(sk))
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_names("#pk", schema::PK)
            .expression_attribute_names("#seen", usage.seen_attribute)
            .expression_attribute_values(":now", s(usage.now))
            .return_values(ReturnValue::AllOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if let Some(window) = usage.window {
            request = request
                .expression_attribute_names("#rw", "rateWindow")
                .expression_attribute_names("#rc", "rateCount")
                .expression_attribute_values(":w", AttributeValue::N(window.to_string()))
                .expression_attribute_values(":one", AttributeValue::N("1".into()));
        }
        for (name, attribute) in &guard.names {
            request = request.expression_attribute_names(*name, *attribute);
        }
        for (name, value) in &guard.values {
            request = request.expression_attribute_values(*name, value.clone());
        }
        match request.send().await {
            Ok(out) => Ok(Ok(out.attributes.unwrap_or_default())),
            Err(err) => match err.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                    Ok(Err(failed.item().cloned().filter(|item| !item.is_empty())))
                }
                _ => Err(StoreError::from_sdk(err)),
            },
        }
    }
}
