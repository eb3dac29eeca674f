//! Cursor pagination: every listing is newest first by (time, id), and a page's cursor is its
//! last row's sort key, so the next page is one index range scan however deep it is.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{CommandError, CommandResult};
use crate::store::Cursor;

/// The largest page a caller may ask for.
pub const MAX_LIMIT: usize = 200;
pub const DEFAULT_LIMIT: usize = 50;

/// A page asked for: where to start and how many rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    pub after: Option<Cursor>,
    pub limit: usize,
}

impl Default for PageRequest {
    fn default() -> Self {
        PageRequest {
            after: None,
            limit: DEFAULT_LIMIT,
        }
    }
}

/// One page of rows, newest first, and the cursor of the next (none on the last page): pass
/// `next_cursor` back as `cursor`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Page<T> {
    pub data: Vec<T>,
    pub next_cursor: Option<String>,
}

impl PageRequest {
    /// From the caller's `cursor` (opaque text from a previous page) and `limit` (1–200).
    pub fn parse(cursor: Option<&str>, limit: Option<&str>) -> CommandResult<Self> {
        let limit = match limit {
            None => DEFAULT_LIMIT,
            Some(l) => l
                .parse::<usize>()
                .ok()
                .filter(|l| (1..=MAX_LIMIT).contains(l))
                .ok_or_else(|| {
                    CommandError::Invalid(format!("limit: 1 to {MAX_LIMIT} expected"))
                })?,
        };
        let after = cursor.map(decode).transpose()?;
        Ok(PageRequest { after, limit })
    }

    /// How many rows to read: one more than shown tells whether another page follows.
    pub(super) fn fetch(&self) -> usize {
        self.limit.saturating_add(1)
    }

    /// The page of `rows` (read with [`fetch`](Self::fetch)), `key` giving a row's sort key.
    pub(super) fn finish<T>(
        &self,
        mut rows: Vec<T>,
        key: impl Fn(&T) -> (DateTime<Utc>, &String),
    ) -> Page<T> {
        let more = rows.len() > self.limit;
        rows.truncate(self.limit);
        let next_cursor = more
            .then(|| rows.last().map(&key))
            .flatten()
            .map(|(at, id)| encode(at, id));
        Page {
            data: rows,
            next_cursor,
        }
    }
}

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

fn encode(at: DateTime<Utc>, id: &str) -> String {
    B64.encode(format!("{}|{id}", at.timestamp_micros()))
}

fn decode(text: &str) -> CommandResult<Cursor> {
    let bad = || CommandError::Invalid("cursor: not one this API gave".into());
    let raw = B64.decode(text).map_err(|_| bad())?;
    let raw = String::from_utf8(raw).map_err(|_| bad())?;
    let (micros, id) = raw.split_once('|').ok_or_else(bad)?;
    let at = micros
        .parse()
        .ok()
        .and_then(DateTime::from_timestamp_micros)
        .ok_or_else(bad)?;
    Ok(Cursor {
        at,
        id: id.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_comes_back_as_given_and_garbage_is_refused() {
        let at = DateTime::from_timestamp_micros(1_764_000_000_123_456).unwrap();
        let text = encode(at, "key_abc|d");
        let page = PageRequest::parse(Some(&text), Some("3")).unwrap();
        assert_eq!(
            page.after,
            Some(Cursor {
                at,
                id: "key_abc|d".into()
            })
        );
        assert_eq!(page.limit, 3);
        for bad in ["", "!!", "bm9waXBl"] {
            assert!(PageRequest::parse(Some(bad), None).is_err(), "{bad:?}");
        }
        for bad in ["0", "201", "x", "-1"] {
            assert!(PageRequest::parse(None, Some(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_next_cursor_only_when_more_rows_follow() {
        let at = DateTime::from_timestamp_micros(1_000_000).unwrap();
        let rows = |n: usize| (0..n).map(|i| (at, format!("r{i}"))).collect::<Vec<_>>();
        let page = PageRequest {
            after: None,
            limit: 2,
        };
        let full = page.finish(rows(3), |r| (r.0, &r.1));
        assert_eq!(full.data.len(), 2);
        let next = PageRequest::parse(full.next_cursor.as_deref(), None).unwrap();
        assert_eq!(next.after.unwrap().id, "r1");
        let last = page.finish(rows(2), |r| (r.0, &r.1));
        assert_eq!((last.data.len(), last.next_cursor), (2, None));
    }
}
