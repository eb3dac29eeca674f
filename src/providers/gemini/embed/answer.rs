//! A Gemini embeddings answer read into its vectors. An answer is mostly numbers: serde_json
//! reads each with a loop that checks and advances one byte at a time, about 330 instructions
//! for a number such as `-0.039315943`, so a 768-wide vector cost more than a whole chat request.
//! [`Reader`] reads the shapes Google sends — the keys the gateway reads, in any order, each once,
//! and numbers eight digits at a time — in about half of that. Anything else (another key, an
//! escaped key, a number outside the range where its arithmetic is serde's) makes it give up,
//! and serde reads the answer. When it does not give up, its vectors are serde's bit for bit:
//! it computes each number the way serde_json does ([`check_against_serde`], run by the
//! property tests and the `embeddings_answer` fuzz target).

use serde::Deserialize;

/// One input's vector and, on Vertex, the tokens the upstream counted for it.
#[derive(Debug, Deserialize)]
pub(super) struct Embedding {
    pub values: Vec<f32>,
    #[serde(skip)]
    pub token_count: Option<f64>,
}

/// The Developer API's `batchEmbedContents` answer: the vectors in input order.
pub(super) fn developer_api(body: &[u8]) -> serde_json::Result<Vec<Embedding>> {
    Reader::new(body)
        .developer_api()
        .map_or_else(|| by_serde::developer_api(body), Ok)
}

/// Vertex's `:predict` answer: the vectors in input order, each with its `token_count`.
pub(super) fn vertex(body: &[u8]) -> serde_json::Result<Vec<Embedding>> {
    Reader::new(body)
        .vertex()
        .map_or_else(|| by_serde::vertex(body), Ok)
}

/// What the reader made of an answer, against serde_json.
#[derive(Debug, PartialEq, Eq)]
pub enum Check {
    /// It gave up (serde_json reads the answer).
    GaveUp,
    /// It read the answer, to serde_json's bits.
    Agreed,
    /// It read what serde_json refuses, or read other numbers.
    Disagreed(String),
}

/// `body` read by the reader as either shape, against serde_json: the property tests' check
/// and the `embeddings_answer` fuzz target's.
pub fn check_against_serde(body: &[u8]) -> Check {
    let shapes = [
        (
            Reader::new(body).developer_api(),
            by_serde::developer_api(body),
        ),
        (Reader::new(body).vertex(), by_serde::vertex(body)),
    ];
    let mut check = Check::GaveUp;
    for (read, serde) in shapes {
        match (read, serde) {
            (None, _) => {}
            (Some(_), Err(e)) => return Check::Disagreed(format!("serde_json refuses it: {e}")),
            (Some(read), Ok(serde)) if bits(&read) != bits(&serde) => {
                return Check::Disagreed(format!("{:?} against serde's {:?}", read, serde))
            }
            (Some(_), Ok(_)) => check = Check::Agreed,
        }
    }
    check
}

/// Each vector's bits (`-0.0` is not `0.0`) and its count.
fn bits(embeddings: &[Embedding]) -> Vec<(Vec<u32>, Option<u64>)> {
    embeddings
        .iter()
        .map(|e| {
            let values = e.values.iter().map(|x| x.to_bits()).collect();
            (values, e.token_count.map(f64::to_bits))
        })
        .collect()
}

/// Any answer serde_json reads (unknown keys, escaped keys, numbers of any length).
mod by_serde {
    use serde::Deserialize;

    use super::Embedding;

    pub fn developer_api(body: &[u8]) -> serde_json::Result<Vec<Embedding>> {
        #[derive(Deserialize)]
        struct Answer {
            #[serde(default)]
            embeddings: Vec<Embedding>,
        }
        serde_json::from_slice::<Answer>(body).map(|a| a.embeddings)
    }

    pub fn vertex(body: &[u8]) -> serde_json::Result<Vec<Embedding>> {
        #[derive(Deserialize)]
        struct Statistics {
            token_count: Option<f64>,
        }
        #[derive(Deserialize)]
        struct Counted {
            values: Vec<f32>,
            statistics: Option<Statistics>,
        }
        #[derive(Deserialize)]
        struct Prediction {
            embeddings: Counted,
        }
        #[derive(Deserialize)]
        struct Answer {
            #[serde(default)]
            predictions: Vec<Prediction>,
        }
        let answer: Answer = serde_json::from_slice(body)?;
        Ok(answer
            .predictions
            .into_iter()
            .map(|p| Embedding {
                values: p.embeddings.values,
                token_count: p.embeddings.statistics.and_then(|s| s.token_count),
            })
            .collect())
    }
}

/// serde_json's powers of ten (the same literals: each is exact up to 10²²).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// serde turns an integer (a number without fraction or exponent) into `f32` directly, the
/// reader through `f64`: the same below 2⁵³, where `f64` holds every integer exactly. Larger
/// ones are left to serde.
const EXACT_INTEGER: u64 = 1 << 53;

/// A cursor over an answer's bytes. Each method returns `None` where the text is not the usual
/// shape, and the caller gives the whole answer to serde.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    /// `{"embeddings": [{"values": [numbers]}, …]}`.
    fn developer_api(mut self) -> Option<Vec<Embedding>> {
        let embeddings = self.only(b"embeddings", |r| r.embeddings(Self::values))?;
        self.end()?;
        Some(embeddings)
    }

    /// `{"predictions": [{"embeddings": {"values": [numbers], "statistics": {"token_count": n,
    /// "truncated": bool}}}, …], "metadata": {"billableCharacterCount": n}}`.
    fn vertex(mut self) -> Option<Vec<Embedding>> {
        let (mut predictions, mut metadata) = (None, None);
        self.object(|r, key| match key {
            b"predictions" => once(&mut predictions, r.embeddings(Self::prediction)),
            b"metadata" => once(
                &mut metadata,
                r.object(|r, key| match key {
                    b"billableCharacterCount" => r.number().map(drop),
                    _ => None,
                }),
            ),
            _ => None,
        })?;
        self.end()?;
        predictions
    }

    /// A list of embeddings, each read by `item` given the previous one's width.
    fn embeddings(
        &mut self,
        item: fn(&mut Self, usize) -> Option<Embedding>,
    ) -> Option<Vec<Embedding>> {
        let mut width = 0;
        self.list(|r| {
            let embedding = item(r, width)?;
            width = embedding.values.len();
            Some(embedding)
        })
    }

    /// `{"values": [numbers]}`.
    fn values(&mut self, width: usize) -> Option<Embedding> {
        let values = self.only(b"values", |r| r.floats(width))?;
        Some(Embedding {
            values,
            token_count: None,
        })
    }

    /// `{"embeddings": {"values": [numbers], "statistics": {…}}}`.
    fn prediction(&mut self, width: usize) -> Option<Embedding> {
        self.only(b"embeddings", |r| r.counted(width))
    }

    fn counted(&mut self, width: usize) -> Option<Embedding> {
        let (mut values, mut statistics) = (None, None);
        self.object(|r, key| match key {
            b"values" => once(&mut values, r.floats(width)),
            b"statistics" => once(&mut statistics, r.statistics()),
            _ => None,
        })?;
        Some(Embedding {
            values: values?,
            token_count: statistics.flatten(),
        })
    }

    /// `{"token_count": n, "truncated": bool}`: the count, if there is one.
    fn statistics(&mut self) -> Option<Option<f64>> {
        let mut count = None;
        self.object(|r, key| match key {
            b"token_count" => once(&mut count, r.number()),
            b"truncated" => r.boolean(),
            _ => None,
        })?;
        Some(count)
    }

    /// `[numbers]`, in a loop of its own over the text: an answer is mostly this.
    fn floats(&mut self, width: usize) -> Option<Vec<f32>> {
        self.expect(b'[')?;
        let text = self.bytes;
        let mut values = Vec::with_capacity(width);
        let mut at = skip_whitespace(text, self.at);
        if text.get(at) != Some(&b']') {
            loop {
                let (value, end) = number(text, at)?;
                values.push(value as f32);
                at = skip_whitespace(text, end);
                match text.get(at)? {
                    b',' => at = skip_whitespace(text, at + 1),
                    b']' => break,
                    _ => return None,
                }
            }
        }
        self.at = at + 1;
        Some(values)
    }

    fn list<T>(&mut self, mut item: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        let mut items = Vec::new();
        self.array(|r| {
            items.push(item(r)?);
            Some(())
        })?;
        Some(items)
    }

    /// `[item, …]`.
    fn array(&mut self, item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.sequence(b'[', b']', item)
    }

    /// `{"key": value, …}`, each value read by `member` for its key.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        self.sequence(b'{', b'}', |r| {
            let key = r.key()?;
            member(r, key)
        })
    }

    /// `{"name": value}`: the value of an object's one member, read by `read`.
    fn only<T>(&mut self, name: &[u8], mut read: impl FnMut(&mut Self) -> Option<T>) -> Option<T> {
        let mut value = None;
        self.object(|r, key| {
            if key == name {
                once(&mut value, read(r))
            } else {
                None
            }
        })?;
        value
    }

    /// `open item, … close`: an array's or an object's items.
    fn sequence(
        &mut self,
        open: u8,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        self.expect(open)?;
        if self.eat(close) {
            return Some(());
        }
        loop {
            item(self)?;
            if !self.eat(b',') {
                return self.expect(close);
            }
        }
    }

    /// A key and its colon. A key written with an escape ends at its first `\"` here: not one of
    /// the reader's keys, which have none, so the reader gives up on it.
    fn key(&mut self) -> Option<&'a [u8]> {
        self.expect(b'"')?;
        let rest = self.bytes.get(self.at..)?;
        let key = rest.get(..rest.iter().position(|&b| b == b'"')?)?;
        self.at += key.len() + 1;
        self.expect(b':')?;
        Some(key)
    }

    /// `true` or `false`.
    fn boolean(&mut self) -> Option<()> {
        self.skip_whitespace();
        let rest = self.bytes.get(self.at..)?;
        let word = [&b"true"[..], b"false"]
            .into_iter()
            .find(|w| rest.starts_with(w))?;
        self.at += word.len();
        Some(())
    }

    fn number(&mut self) -> Option<f64> {
        let (value, end) = number(self.bytes, skip_whitespace(self.bytes, self.at))?;
        self.at = end;
        Some(value)
    }

    /// Nothing but whitespace is left.
    fn end(&mut self) -> Option<()> {
        self.skip_whitespace();
        (self.at == self.bytes.len()).then_some(())
    }

    /// `byte`, after any whitespace.
    fn expect(&mut self, byte: u8) -> Option<()> {
        self.eat(byte).then_some(())
    }

    /// Whether `byte` comes next after any whitespace (and is then passed).
    fn eat(&mut self, byte: u8) -> bool {
        self.skip_whitespace();
        self.eat_byte(byte)
    }

    fn eat_byte(&mut self, byte: u8) -> bool {
        let here = self.peek() == Some(byte);
        self.at += usize::from(here);
        here
    }

    fn skip_whitespace(&mut self) {
        self.at = skip_whitespace(self.bytes, self.at);
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }
}

/// Where the whitespace from `at` ends (JSON's four whitespace bytes).
fn skip_whitespace(text: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = text.get(at) {
        at += 1;
    }
    at
}

/// The JSON number at `at` and where it ends, as serde_json computes it (without its
/// `float_roundtrip` feature): the digits as an integer, multiplied or divided once by a power
/// of ten. Only up to 19 significant digits and a power within [`POW10`], where that is all
/// serde does. (Functions of the text rather than [`Reader`] methods: the position then stays
/// in a register.) Inlined into the loop over a vector, which calls it 768 times or more.
#[inline(always)]
fn number(text: &[u8], mut at: usize) -> Option<(f64, usize)> {
    let negative = text.get(at) == Some(&b'-');
    at += usize::from(negative);
    let mut significand = 0;
    // A leading zero is the whole integer part; a digit after it is then not a number's end,
    // where the caller looks for a `,` or a closing bracket, and gives up.
    let mut digits = match text.get(at)? {
        b'0' => {
            at += 1;
            0
        }
        b'1'..=b'9' => read_digits(text, &mut at, &mut significand),
        _ => return None,
    };
    let mut exponent = 0i32;
    let mut integer = true;
    if text.get(at) == Some(&b'.') {
        integer = false;
        at += 1;
        let start = at;
        if significand == 0 {
            // Leading zeros add nothing to the significand.
            while text.get(at) == Some(&b'0') {
                at += 1;
            }
        }
        digits += read_digits(text, &mut at, &mut significand);
        if at == start {
            return None;
        }
        exponent = -i32::try_from(at - start).ok()?;
    }
    if let Some(b'e' | b'E') = text.get(at) {
        integer = false;
        at += 1;
        let negative_power = text.get(at) == Some(&b'-');
        at += usize::from(matches!(text.get(at), Some(b'-' | b'+')));
        let mut power = 0;
        match read_digits(text, &mut at, &mut power) {
            1..=3 if negative_power => exponent = exponent.saturating_sub(power as i32),
            1..=3 => exponent = exponent.saturating_add(power as i32),
            _ => return None,
        }
    }
    if digits > 19 || (integer && significand >= EXACT_INTEGER) {
        return None;
    }
    let scale = *POW10.get(exponent.unsigned_abs() as usize)?;
    let value = significand as f64;
    let value = if exponent >= 0 {
        value * scale
    } else {
        value / scale
    };
    Some((if negative { -value } else { value }, at))
}

/// Adds the digits of `text` from `at` to `value` (wrapping past 19 of them) and moves `at`
/// past them; how many there were. Eight bytes at a time, but for the text's last seven.
fn read_digits(text: &[u8], at: &mut usize, value: &mut u64) -> usize {
    let start = *at;
    while let Some(word) = text.get(*at..*at + 8) {
        let word = u64::from_le_bytes(word.try_into().unwrap_or_default());
        let (digits, count) = leading_digits(word);
        *value = value.wrapping_mul(TENS[count]).wrapping_add(digits);
        *at += count;
        if count < 8 {
            return *at - start;
        }
    }
    while let Some(&digit @ b'0'..=b'9') = text.get(*at) {
        *value = value.wrapping_mul(10).wrapping_add(u64::from(digit - b'0'));
        *at += 1;
    }
    *at - start
}

/// 10⁰ to 10⁸.
const TENS: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// The ASCII digits that eight bytes (a little-endian word) start with: their value and how
/// many there are. Each byte's digit is one subtraction away; the digits are moved to the
/// word's high end, behind zeros, and three multiplications combine them pairwise (the
/// technique of fast_float and simdjson).
fn leading_digits(word: u64) -> (u64, usize) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let digits = word.wrapping_sub(ONES * u64::from(b'0'));
    // A byte's high bit here marks a byte below `0` or above `9`; a borrow or carry only
    // reaches the bytes after it, which are not digits' then.
    let above_nine = word.wrapping_add(ONES * u64::from(0x7f - b'9'));
    let not_digit = (digits | above_nine) & (ONES * 0x80);
    let count = (not_digit.trailing_zeros() / 8) as usize;
    if count == 0 {
        return (0, 0);
    }
    let digits = digits << (64 - 8 * count);
    let pairs = digits.wrapping_mul(10).wrapping_add(digits >> 8);
    const LOW: u64 = 0x0000_00FF_0000_00FF;
    let high = (pairs & LOW).wrapping_mul(100 + (1_000_000 << 32));
    let low = ((pairs >> 16) & LOW).wrapping_mul(1 + (10_000 << 32));
    (u64::from((high.wrapping_add(low) >> 32) as u32), count)
}

/// Stores `value` in an empty `slot`; `None` when the slot is full (serde refuses a duplicate
/// key) or there is no value.
fn once<T>(slot: &mut Option<T>, value: Option<T>) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value?);
    Some(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::providers::test_support::fixture;

    /// A JSON text built by a test, written with the whitespace it was given.
    #[derive(Debug, Clone)]
    enum Node {
        Object(Vec<(String, Node)>),
        Array(Vec<Node>),
        Text(String),
    }

    impl Node {
        fn write(&self, out: &mut String, space: &mut impl Iterator<Item = &'static str>) {
            fn gap(out: &mut String, space: &mut impl Iterator<Item = &'static str>) {
                out.push_str(space.next().unwrap_or_default());
            }
            match self {
                Node::Text(t) => out.push_str(t),
                Node::Array(items) => {
                    out.push('[');
                    for (i, item) in items.iter().enumerate() {
                        out.push_str(if i == 0 { "" } else { "," });
                        gap(out, space);
                        item.write(out, space);
                        gap(out, space);
                    }
                    out.push(']');
                }
                Node::Object(members) => {
                    out.push('{');
                    for (i, (key, value)) in members.iter().enumerate() {
                        out.push_str(if i == 0 { "" } else { "," });
                        gap(out, space);
                        out.push_str(&format!("\"{key}\""));
                        gap(out, space);
                        out.push(':');
                        gap(out, space);
                        value.write(out, space);
                        gap(out, space);
                    }
                    out.push('}');
                }
            }
        }

        fn text(&self, space: &[&'static str]) -> String {
            let mut out = String::new();
            self.write(&mut out, &mut space.iter().copied().cycle());
            out
        }
    }

    fn object(members: Vec<(&str, Node)>) -> Node {
        Node::Object(
            members
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        )
    }

    /// Whitespace between tokens, cycled through.
    fn space() -> impl Strategy<Value = Vec<&'static str>> {
        prop::collection::vec(
            prop::sample::select(vec!["", "", " ", "\n  ", "\t", "\r\n"]),
            1..6,
        )
    }

    /// A vector's number as the Developer API writes it (the shortest `f32` text), as Vertex
    /// does (the shortest `f64` text), or in exponent form.
    fn usual(x: f32) -> impl Strategy<Value = String> {
        prop_oneof![
            Just(serde_json::to_string(&x).unwrap()),
            Just(serde_json::to_string(&f64::from(x)).unwrap()),
            Just(format!("{x:e}")),
        ]
    }

    /// Any number's text: mostly a vector's usual numbers, then those of any `f32`, any JSON
    /// number (long, tiny, huge), and texts that are not numbers.
    fn number() -> BoxedStrategy<String> {
        prop_oneof![
            6 => realistic(),
            1 => any::<f32>()
                .prop_filter("JSON has no NaN or infinity", |x| x.is_finite())
                .prop_flat_map(usual),
            1 => "-?(0|[1-9][0-9]{0,21})(\\.[0-9]{1,24})?([eE][+-]?[0-9]{1,4})?",
            1 => "-?(0|[1-9][0-9]{0,5})(\\.[0-9]{1,10})?([eE][+-]?[0-9]{1,2})?",
            1 => "-?0?[0-9]{0,2}\\.?[0-9]{0,2}[eE]?[+-]?",
        ]
        .boxed()
    }

    fn vector(number: BoxedStrategy<String>) -> impl Strategy<Value = Node> {
        prop::collection::vec(number.prop_map(Node::Text), 0..6).prop_map(Node::Array)
    }

    /// A key as the reader expects it, or with something serde reads and the reader doesn't: a
    /// duplicate, an unknown key, the key written with an escape.
    fn odd(members: Vec<(&'static str, Node)>) -> impl Strategy<Value = Node> {
        let n = members.len();
        (
            Just(members),
            prop::option::weighted(0.1, (0..n, 0..3usize)),
        )
            .prop_map(|(members, odd)| {
                let mut members: Vec<(String, Node)> = members
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect();
                if let Some((at, how)) = odd {
                    let (key, value) = members[at].clone();
                    match how {
                        0 => members.push((key, value)),
                        1 => members.push(("usage".into(), Node::Text("{}".into()))),
                        _ => members[at].0 = key.replacen(&key[..1], "\\u0076", 1),
                    }
                }
                Node::Object(members)
            })
            .prop_shuffle_members()
    }

    trait ShuffleMembers {
        fn prop_shuffle_members(self) -> BoxedStrategy<Node>;
    }

    impl<S: Strategy<Value = Node> + 'static> ShuffleMembers for S {
        /// The object's members in any order.
        fn prop_shuffle_members(self) -> BoxedStrategy<Node> {
            self.prop_flat_map(|node| match node {
                Node::Object(members) => {
                    Just(members).prop_shuffle().prop_map(Node::Object).boxed()
                }
                other => Just(other).boxed(),
            })
            .boxed()
        }
    }

    fn developer_answer(number: BoxedStrategy<String>) -> impl Strategy<Value = Node> {
        let item = vector(number).prop_flat_map(|v| odd(vec![("values", v)]));
        prop::collection::vec(item, 0..4)
            .prop_flat_map(|items| odd(vec![("embeddings", Node::Array(items))]))
    }

    fn vertex_answer(number: BoxedStrategy<String>) -> impl Strategy<Value = Node> {
        let count = prop_oneof![number.clone(), Just("null".to_owned())];
        let statistics = (count, any::<bool>()).prop_flat_map(|(count, truncated)| {
            odd(vec![
                ("token_count", Node::Text(count)),
                ("truncated", Node::Text(truncated.to_string())),
            ])
        });
        let counted = (vector(number.clone()), prop::option::of(statistics)).prop_flat_map(
            |(values, statistics)| {
                let mut members = vec![("values", values)];
                members.extend(statistics.map(|s| ("statistics", s)));
                odd(members)
            },
        );
        let prediction = counted.prop_flat_map(|c| odd(vec![("embeddings", c)]));
        (
            prop::collection::vec(prediction, 0..4),
            prop::option::of(number),
        )
            .prop_flat_map(|(predictions, billed)| {
                let mut members = vec![("predictions", Node::Array(predictions))];
                members.extend(billed.map(|n| {
                    (
                        "metadata",
                        object(vec![("billableCharacterCount", Node::Text(n))]),
                    )
                }));
                odd(members)
            })
    }

    /// Numbers in a vector's usual range, as Google writes them.
    fn realistic() -> BoxedStrategy<String> {
        prop_oneof![Just(0.0f32), -1.0f32..-1e-4, 1e-4f32..1.0]
            .prop_flat_map(usual)
            .boxed()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn the_reader_agrees_with_serde(
            dev in developer_answer(number()),
            vertex in vertex_answer(number()),
            space in space(),
            cut in any::<prop::sample::Index>(),
        ) {
            // Each answer whole, cut short, and with something after it.
            for text in [dev.text(&space), vertex.text(&space)] {
                let short = &text.as_bytes()[..cut.index(text.len())];
                let long = format!("{text} 0");
                for text in [text.as_bytes(), short, long.as_bytes()] {
                    let check = check_against_serde(text);
                    prop_assert!(!matches!(check, Check::Disagreed(_)), "{check:?}: {}", String::from_utf8_lossy(text));
                }
            }
        }

        /// The reader gives up only on the unusual: answers of the usual shape with numbers in
        /// a vector's range, any order and whitespace, are its to read.
        #[test]
        fn the_reader_reads_the_usual_answers(
            vectors in prop::collection::vec(prop::collection::vec(realistic(), 1..20), 1..4),
            count in 0u32..5000,
            space in space(),
        ) {
            let array = |v: &Vec<String>| Node::Array(v.iter().cloned().map(Node::Text).collect());
            let dev = object(vec![("embeddings", Node::Array(
                vectors.iter().map(|v| object(vec![("values", array(v))])).collect(),
            ))]);
            let text = dev.text(&space);
            prop_assert_eq!(check_against_serde(text.as_bytes()), Check::Agreed, "{}", text);
            let statistics = object(vec![
                ("truncated", Node::Text("false".into())),
                ("token_count", Node::Text(count.to_string())),
            ]);
            let vertex = object(vec![
                ("metadata", object(vec![("billableCharacterCount", Node::Text("12".into()))])),
                ("predictions", Node::Array(vectors.iter().map(|v| object(vec![("embeddings", object(vec![
                    ("statistics", statistics.clone()),
                    ("values", array(v)),
                ]))])).collect())),
            ]);
            let text = vertex.text(&space);
            prop_assert_eq!(check_against_serde(text.as_bytes()), Check::Agreed, "{}", text);
        }
    }

    #[test]
    fn the_fixtures_are_read_without_serde() {
        let dev = fixture("gemini-batch-embed-contents.json");
        let read = Reader::new(&dev).developer_api().expect("read");
        assert_eq!(bits(&read), bits(&by_serde::developer_api(&dev).unwrap()));
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].values[0], -0.039315943);
        let vertex = fixture("vertex-embedding-predict.json");
        let read = Reader::new(&vertex).vertex().expect("read");
        assert_eq!(bits(&read), bits(&by_serde::vertex(&vertex).unwrap()));
        assert_eq!(read[0].token_count, Some(4.0));
    }

    /// Numbers where a plainer reader would differ from serde: the reader must leave them to it.
    #[test]
    fn the_reader_leaves_serde_the_numbers_it_would_compute_otherwise() {
        for number in [
            // 2⁶⁰ + 2³⁶ + 1: serde makes this integer an `f32` at once, to 2⁶⁰ + 2³⁷;
            // through `f64` it would be 2⁶⁰.
            "1152921573326323713",
            // 20 significant digits (more than a u64 holds), a power beyond 10²²,
            // a leading zero, a fraction or exponent without digits.
            "0.18446744073709551617",
            "1e23",
            "1.5e-22",
            "01",
            "1.",
            "1e",
            "-",
        ] {
            let text = format!("{{\"embeddings\":[{{\"values\":[{number}]}}]}}");
            let check = check_against_serde(text.as_bytes());
            assert!(!matches!(check, Check::Disagreed(_)), "{check:?}: {text}");
        }
    }

    #[test]
    fn digits_are_read_eight_bytes_at_once() {
        let read = |bytes: &[u8; 8]| leading_digits(u64::from_le_bytes(*bytes));
        assert_eq!(read(b"12345678"), (12_345_678, 8));
        assert_eq!(read(b"00000009"), (9, 8));
        assert_eq!(read(b"99999999"), (99_999_999, 8));
        assert_eq!(read(b"1234567,"), (1_234_567, 7));
        assert_eq!(read(b"039]    "), (39, 3));
        assert_eq!(read(b"7e-05,0."), (7, 1));
        for not_digits in [
            b",2345678",
            b"/2345678",
            b":2345678",
            b"\xff2345678",
            b"\x802345678",
        ] {
            assert_eq!(read(not_digits), (0, 0));
        }
        let text = b"0.1234567890123456789e12";
        let (mut at, mut value) = (2, 0);
        assert_eq!(read_digits(text, &mut at, &mut value), 19);
        assert_eq!((at, value), (21, 1_234_567_890_123_456_789));
    }
}
