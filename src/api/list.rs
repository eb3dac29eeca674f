//! A JSON list read as typed items in one pass.
//!
//! serde_json takes a raw slice only by reading it whole, so a list read first as raw items and
//! then item by item reads each item twice (and every list inside it once more per level). A
//! list is read here in one pass onto its item type; only a list that pass cannot read is read
//! item by item, so that an error names the first item that fails, after the caller's own
//! checks of the items before it, exactly as reading it item by item would.

use serde::Deserialize;
use serde_json::value::RawValue;

/// The items of a list, each with its index: read already, or still raw (the pass failed).
pub enum Items<'a, T> {
    Read(std::iter::Enumerate<std::vec::IntoIter<T>>),
    Raw(std::iter::Enumerate<std::vec::IntoIter<&'a RawValue>>),
}

/// `list` read as `T`s: all in one pass when they all read, else as raw items read one by one
/// as [`Items`] is iterated. The error is serde_json's, when `list` is not a list.
pub fn items<'a, T: Deserialize<'a>>(
    list: &'a RawValue,
) -> Result<Items<'a, T>, serde_json::Error> {
    if let Ok(all) = serde_json::from_str::<Vec<T>>(list.get()) {
        return Ok(Items::Read(all.into_iter().enumerate()));
    }
    let raws: Vec<&'a RawValue> = serde_json::from_str(list.get())?;
    Ok(Items::Raw(raws.into_iter().enumerate()))
}

impl<'a, T: Deserialize<'a>> Iterator for Items<'a, T> {
    /// An item's index, and the item or why it does not read as `T`.
    type Item = (usize, Result<T, serde_json::Error>);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Items::Read(all) => all.next().map(|(i, item)| (i, Ok(item))),
            Items::Raw(raws) => raws
                .next()
                .map(|(i, raw)| (i, serde_json::from_str(raw.get()))),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Items::Read(all) => all.size_hint(),
            Items::Raw(raws) => raws.size_hint(),
        }
    }
}

impl<'a, T: Deserialize<'a>> ExactSizeIterator for Items<'a, T> {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Deserialize)]
    struct Tool<'a> {
        #[serde(borrow)]
        name: &'a str,
        #[serde(borrow, default)]
        schema: Option<&'a RawValue>,
    }

    type Outcome = Vec<(usize, Result<(String, Option<String>), String>)>;

    fn read(list: &str) -> Result<(bool, Outcome), String> {
        let raw: &RawValue = serde_json::from_str(list).map_err(|e| e.to_string())?;
        let items = items::<Tool>(raw).map_err(|e| e.to_string())?;
        let one_pass = matches!(items, Items::Read(_));
        let outcome = items
            .map(|(i, t)| {
                let t = t
                    .map(|t| (t.name.to_owned(), t.schema.map(|s| s.get().to_owned())))
                    .map_err(|e| e.to_string());
                (i, t)
            })
            .collect();
        Ok((one_pass, outcome))
    }

    /// The reading this module replaces: the list as raw items, then each item.
    fn item_by_item(list: &str) -> Result<Outcome, String> {
        let raws: Vec<&RawValue> = serde_json::from_str(list).map_err(|e| e.to_string())?;
        Ok(raws
            .into_iter()
            .enumerate()
            .map(|(i, raw)| {
                let t = serde_json::from_str::<Tool>(raw.get())
                    .map(|t| (t.name.to_owned(), t.schema.map(|s| s.get().to_owned())))
                    .map_err(|e| e.to_string());
                (i, t)
            })
            .collect())
    }

    #[test]
    fn a_list_that_reads_is_read_in_one_pass() {
        let (one_pass, outcome) =
            read(r#"[{"name":"a","schema":{"type":"object"}},{"name":"b"}]"#).unwrap();
        assert!(one_pass);
        assert_eq!(
            outcome,
            vec![
                (0, Ok(("a".into(), Some(r#"{"type":"object"}"#.into())))),
                (1, Ok(("b".into(), None)))
            ]
        );
    }

    #[test]
    fn an_item_that_does_not_read_is_named_after_the_items_before_it() {
        let (one_pass, outcome) = read(r#"[{"name":"a"},{"nom":"b"},{"name":3}]"#).unwrap();
        assert!(!one_pass);
        assert_eq!(outcome[0], (0, Ok(("a".into(), None))));
        assert!(matches!(&outcome[1], (1, Err(e)) if e.contains("missing field `name`")));
        assert!(matches!(&outcome[2], (2, Err(e)) if e.contains("invalid type")));
    }

    #[test]
    fn not_a_list_is_serdes_error() {
        assert!(read(r#"{"name":"a"}"#)
            .unwrap_err()
            .contains("invalid type: map"));
    }

    fn item() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z\"\\\\é]{0,6}".prop_map(|n| serde_json::json!({"name": n}).to_string()),
            ("[a-z]{0,4}", "[a-z]{0,4}").prop_map(|(n, s)| {
                serde_json::json!({"schema": {"type": s}, "name": n}).to_string()
            }),
            Just(r#"{"name":"x","name":"y"}"#.to_owned()),
            Just(r#"{"schema":null}"#.to_owned()),
            Just(r#"{"name":1}"#.to_owned()),
            Just("[]".to_owned()),
            Just("null".to_owned()),
        ]
    }

    proptest! {
        /// One pass or not, the same items (and the same errors, at the same indices) as the
        /// list read item by item.
        #[test]
        fn the_same_items_as_item_by_item(items in prop::collection::vec(item(), 0..6)) {
            let list = format!("[{}]", items.join(","));
            let (one_pass, outcome) = read(&list).unwrap();
            prop_assert_eq!(&outcome, &item_by_item(&list).unwrap());
            prop_assert_eq!(one_pass, outcome.iter().all(|(_, t)| t.is_ok()));
        }
    }
}
