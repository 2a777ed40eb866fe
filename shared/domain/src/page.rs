//! A listing's request, one type for every listing: `limit` and `cursor`, parsed once at the
//! edge (an HTTP query, an MCP tool's arguments, the operator CLI). The cursor itself is checked
//! by the store against the listing it claims (`crate::store::StoreError::BadCursor`, a 400).

use crate::error::ApiError;

/// Page size when the request names none.
pub const DEFAULT_LIMIT: i32 = 50;
/// Largest page size.
pub const MAX_LIMIT: i32 = 100;

/// One page asked for: `limit` items (1 to [`MAX_LIMIT`]) from `cursor` (the previous page's
/// `nextCursor`) on, or from the start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// Items on the page, 1 to [`MAX_LIMIT`].
    pub limit: i32,
    /// Where the page starts: an earlier page's `nextCursor`; `None` for the first page.
    pub cursor: Option<String>,
}

impl PageRequest {
    /// The page a request's `limit` (decimal; [`DEFAULT_LIMIT`] when absent) and `cursor` ask for.
    ///
    /// Errors: 400 naming `limit` when it is not 1 to [`MAX_LIMIT`].
    pub fn parse(limit: Option<&str>, cursor: Option<&str>) -> Result<Self, ApiError> {
        let limit = match limit {
            None => DEFAULT_LIMIT,
            Some(l) => l
                .parse::<i32>()
                .ok()
                .filter(|l| (1..=MAX_LIMIT).contains(l))
                .ok_or_else(|| ApiError::invalid("limit", format!("must be 1 to {MAX_LIMIT}")))?,
        };
        Ok(PageRequest {
            limit,
            cursor: cursor.map(str::to_owned),
        })
    }

    /// The page after `cursor` (`None`: the first) of [`MAX_LIMIT`] items: for walking a whole
    /// listing.
    pub fn largest(cursor: Option<String>) -> Self {
        PageRequest {
            limit: MAX_LIMIT,
            cursor,
        }
    }

    /// The cursor, borrowed.
    pub fn cursor(&self) -> Option<&str> {
        self.cursor.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field a 400 names, if the result is one.
    fn field_of<T>(result: Result<T, ApiError>) -> Option<String> {
        match result {
            Err(ApiError::Invalid { field, .. }) => Some(field),
            _ => None,
        }
    }

    #[test]
    fn a_limit_is_one_to_the_largest_page() {
        assert_eq!(PageRequest::parse(None, None).unwrap().limit, DEFAULT_LIMIT);
        assert_eq!(PageRequest::parse(Some("1"), None).unwrap().limit, 1);
        assert_eq!(
            PageRequest::parse(Some("100"), Some("c")).unwrap().cursor(),
            Some("c")
        );
        for bad in ["0", "101", "-1", "ten", ""] {
            assert!(
                field_of(PageRequest::parse(Some(bad), None)).as_deref() == Some("limit"),
                "{bad}"
            );
        }
    }
}
