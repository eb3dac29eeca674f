//! Money and, as the billing issue lands, the gates and the ledger writer.
pub mod money;
