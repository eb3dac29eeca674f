//! Where a value is in a request, as an error message names it (`input[3].content[0]`): the
//! place is a value over its parent, written out only when a message is.

use std::fmt::{self, Display};

/// `<parent>[<index>]` or `<parent>.<field>`, over a name (`&"input"`) or another place.
#[derive(Clone, Copy)]
pub enum At<'p> {
    Index(&'p dyn Display, usize),
    Field(&'p dyn Display, &'static str),
}

impl<'p> At<'p> {
    /// `self[index]`.
    pub fn index(&'p self, index: usize) -> At<'p> {
        At::Index(self, index)
    }

    /// `self.field`.
    pub fn field(&'p self, field: &'static str) -> At<'p> {
        At::Field(self, field)
    }
}

impl Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            At::Index(parent, index) => write!(f, "{parent}[{index}]"),
            At::Field(parent, field) => write!(f, "{parent}.{field}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_is_written_as_its_path() {
        let input = At::Index(&"input", 3);
        assert_eq!(
            input.field("content").index(0).to_string(),
            "input[3].content[0]"
        );
        assert_eq!(At::Field(&"tools", "name").to_string(), "tools.name");
    }
}
