//! The per-URL path of `miqps.canonical.Canonicalizer`, compiled: `canonical_texts`,
//! `canonical_block` and `canonicalize` (the canonical URL), and `decide` without layers
//! (with the URL's pattern and the names kept and dropped).
//!
//! It follows `miqps/canonical.py` step for step on the common case (http or https, a
//! plain hostname, matrix parameters in one segment at most) and executes the *plans* the
//! Python core computes: it never decides which parameter to keep. For each text it
//! answers one of
//!
//! - the canonical URL (for `decide_text`, with the decision's details);
//! - `None`: out of the common case, the caller takes its own path for this text;
//! - a miss, a `Miss` (the domain or None, the plan table's number, the key, the names): no
//!   plan is known for the key yet; the caller computes it, hands it over with `add_plan`,
//!   and asks again.
//!
//! `miqps_native.pyi` (next to `Cargo.toml`, shipped in the wheel) types this interface.
//!
//! The pure-Python path is the reference: a differential test holds both to the same bytes.
//!
//! `facts.rs` compiles the walks over a whole map document that storing a map makes.

use std::sync::atomic::{AtomicBool, Ordering};

use rustc_hash::FxHashMap as HashMap;
use rustc_hash::FxHashSet as HashSet;

use ada_url::Url;
use memchr::{memchr, memchr2, memchr_iter};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use smallvec::SmallVec;

mod facts;
mod front;

const MAX_URL_BYTES: usize = 8 * 1024;
const CACHE_SIZE: usize = 1 << 16;
/// Hosts remembered as having no map (`mark_absent`), before the set starts over.
const ABSENT_SIZE: usize = 1 << 18;
const HEX: &[u8] = b"0123456789abcdefABCDEF";

/// A URL's pairs, or their names: on the stack for all but long queries.
type Strs<'a> = SmallVec<[&'a str; 16]>;

enum Plan {
    Irregular,
    KeepAll,
    KeepNone,
    Pick(Vec<usize>),
    /// Keep `kept`; if a kept pair is a confirmed default, the pairs left form another
    /// pattern (`Moved`); otherwise apply the plan of `then` (this pattern's when `None`).
    Elide {
        kept: Vec<usize>,
        defaults: Vec<String>,
        then: Option<String>,
    },
}

/// A plan table: a domain's plans (or the unmapped domains'), under the number
/// (`table`) the Python core handed out when it started the table.
struct Plans {
    table: u64,
    plans: HashMap<String, Plan>,
    /// What the stream front needs of the domain's map (`front_batch`).
    map: MapFacts,
    /// Whether a URL was answered through this table since `take_touched` last looked.
    touched: AtomicBool,
}

/// Of a domain's map: its version, its learned patterns (each with, when it drops a
/// parameter, the names it keeps, sorted: what an audit of its items hashes), and the
/// oldest time one of its decisions was made, in seconds since the epoch.
struct MapFacts {
    version: u64,
    learned: HashMap<String, Option<Vec<String>>>,
    oldest_decision: f64,
}

impl Default for MapFacts {
    fn default() -> Self {
        MapFacts {
            version: 0,
            learned: HashMap::default(),
            oldest_decision: f64::NEG_INFINITY,
        }
    }
}

impl Plans {
    fn new(table: u64) -> Self {
        Plans {
            table,
            plans: HashMap::default(),
            map: MapFacts::default(),
            touched: AtomicBool::new(false),
        }
    }

    fn insert(&mut self, key: String, plan: Plan) {
        if self.plans.len() >= CACHE_SIZE {
            self.plans.clear();
        }
        self.plans.insert(key, plan);
    }
}

enum Answer {
    /// The canonical URL was appended to the output, through the plan table of this number
    /// (0: no plan was needed, the URL has no parameter).
    Written(u64),
    Slow,
    Miss(Miss),
}

/// No plan is known yet for `key` (the path shape and `names`, or the names alone for a
/// domain without a map) in the plan table numbered `table` (of `domain`, None for the
/// unmapped table): the caller computes it, hands it over with `add_plan`, and asks again.
/// With maps loaded on demand, table 0 means that `domain` has no table yet: the caller
/// installs its map or marks it absent, and asks again; `key` is then the URL's pattern
/// (empty without parameters) and `names` is empty.
#[pyclass(module = "miqps_native", frozen, get_all)]
struct Miss {
    domain: Option<String>,
    table: u64,
    key: String,
    names: Vec<String>,
}

/// What `Canonicalizer.decide` says of a URL besides its canonical form: its pattern
/// (path shape and every parameter name, sorted), and the names kept and dropped, sorted.
#[derive(Default)]
struct Detail {
    pattern: String,
    kept: Vec<String>,
    dropped: Vec<String>,
    /// The URL's host, and whether it has any parameter (query or matrix).
    host: String,
    params: bool,
}

#[allow(clippy::large_enum_variant)] // the pairs stay on the stack: no allocation per URL
enum Kept<'a> {
    Pairs(Strs<'a>),
    Slow,
    Miss(String, Vec<String>),
}

enum Applied<'a> {
    Done(Strs<'a>),
    Moved(Strs<'a>),
    Slow,
    Miss(String, Vec<String>),
}

fn name_of(pair: &str) -> &str {
    match memchr(b'=', pair.as_bytes()) {
        Some(at) => &pair[..at],
        None => pair,
    }
}

fn is_hex(byte: u8) -> bool {
    HEX.contains(&byte)
}

fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

fn ends_in_open_escape(out: &[u8]) -> bool {
    match out {
        [.., b'%'] => true,
        [.., b'%', last] => is_hex(*last),
        _ => false,
    }
}

/// `miqps.urls.normalize_percent_encoding`, on ASCII text: each `%` and two hex digits
/// becomes the unreserved character it encodes, unless that is a hex digit completing an
/// escape with what precedes it (`%%36%31` stays), or the triplet with uppercase digits.
fn normalize_percent_encoding(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        if byte == b'%' && at + 2 < bytes.len() && is_hex(bytes[at + 1]) && is_hex(bytes[at + 2]) {
            let (hi, lo) = (bytes[at + 1], bytes[at + 2]);
            let value = (hex_value(hi) << 4) | hex_value(lo);
            if is_unreserved(value) && !(is_hex(value) && ends_in_open_escape(&out)) {
                out.push(value);
            } else {
                out.extend_from_slice(&[b'%', hi.to_ascii_uppercase(), lo.to_ascii_uppercase()]);
            }
            at += 3;
        } else {
            out.push(byte);
            at += 1;
        }
    }
    String::from_utf8(out).expect("ASCII in, ASCII out")
}

fn hex_value(byte: u8) -> u8 {
    match byte {
        b'0'..=b'9' => byte - b'0',
        b'a'..=b'f' => byte - b'a' + 10,
        _ => byte - b'A' + 10,
    }
}

fn normalized(text: &str) -> std::borrow::Cow<'_, str> {
    if memchr(b'%', text.as_bytes()).is_some() {
        std::borrow::Cow::Owned(normalize_percent_encoding(text))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// `miqps.urls._is_word` on ASCII: at most 32 characters, no digit.
fn is_word(segment: &str) -> bool {
    segment.len() <= 32 && !segment.bytes().any(|byte| byte.is_ascii_digit())
}

/// `miqps.urls.path_shape` of a path that starts with `/`.
fn path_shape(path: &str) -> String {
    let rest = &path[1..];
    let (first, depth) = match memchr(b'/', rest.as_bytes()) {
        None => (rest, 0),
        Some(end) => (
            &rest[..end],
            memchr_iter(b'/', &rest.as_bytes()[end..]).count(),
        ),
    };
    let mut shape = String::with_capacity(2 + first.len() + 2 * depth);
    shape.push('/');
    shape.push_str(if is_word(first) { first } else { "*" });
    for _ in 0..depth {
        shape.push_str("/*");
    }
    shape
}

fn strictly_increasing(names: &[&str]) -> bool {
    names.windows(2).all(|pair| pair[0] < pair[1])
}

#[pyclass(module = "miqps_native")]
struct Core {
    domains: HashMap<String, Plans>,
    unmapped: Plans,
    /// With maps loaded on demand (`set_on_demand`): a host with no table is asked for
    /// (a miss of table 0) unless it is known to have no map.
    on_demand: bool,
    absent: HashSet<String>,
}

impl Core {
    /// The answer for `text`; a canonical URL is appended to `out`, and with `detail`,
    /// what the decision says of it there.
    fn answer(&self, text: &str, out: &mut String, mut detail: Option<&mut Detail>) -> Answer {
        let bytes = text.as_bytes();
        if bytes.is_empty()
            || bytes.len() > MAX_URL_BYTES
            || bytes.iter().any(|byte| *byte < 0x20 || *byte == 0x7f)
        {
            return Answer::Slow;
        }
        let parsed = match Url::parse(text, None) {
            Ok(parsed) => parsed,
            Err(_) => return Answer::Slow,
        };
        let href = parsed.href();
        let start = if href.starts_with("https://") {
            8
        } else if href.starts_with("http://") {
            7
        } else {
            return Answer::Slow;
        };
        if !href.is_ascii() {
            return Answer::Slow;
        }
        let (href, route) = match memchr(b'#', href.as_bytes()) {
            None => (href, String::new()),
            Some(at) => {
                let fragment = &href[at..];
                let route = if fragment[1..].starts_with('!') {
                    normalized(fragment).into_owned()
                } else {
                    String::new()
                };
                (&href[..at], route)
            }
        };
        let (base, query) = match memchr(b'?', href.as_bytes()) {
            None => (href, ""),
            Some(at) => (&href[..at], &href[at + 1..]),
        };
        let slash = match memchr(b'/', &base.as_bytes()[start..]) {
            Some(offset) if offset > 0 => start + offset,
            _ => return Answer::Slow,
        };
        let host = &base[start..slash];
        let plans = self.domains.get(host);
        let unloaded = match plans {
            Some(plans) => {
                plans.touched.store(true, Ordering::Relaxed);
                false
            }
            None if memchr2(b'@', b':', host.as_bytes()).is_some() => return Answer::Slow,
            None => self.on_demand && !self.absent.contains(host),
        };
        let base = normalized(base);
        let query = normalized(query);
        let (origin, path) = base.split_at(slash);
        let (path, matrix) = if memchr(b';', path.as_bytes()).is_some() {
            split_matrix(path)
        } else {
            (std::borrow::Cow::Borrowed(path), Vec::new())
        };
        let mut pairs: Strs = SmallVec::new();
        let mut from = 0;
        for end in memchr_iter(b'&', query.as_bytes()).chain(std::iter::once(query.len())) {
            if end > from {
                pairs.push(&query[from..end]);
            }
            from = end + 1;
        }
        let matrix_at = match matrix.first() {
            None => None,
            Some((at, _)) => {
                if matrix.iter().any(|(end, _)| end != at)
                    || pairs.iter().any(|pair| pair.starts_with(';'))
                {
                    return Answer::Slow;
                }
                Some(*at)
            }
        };
        pairs.extend(matrix.iter().map(|(_, param)| param.as_str()));
        if unloaded {
            // The caller loads the domain's map and asks again; the key of the URL's
            // pattern (none without parameters) lets it read that pattern with the map.
            let mut key = String::new();
            if !pairs.is_empty() {
                pairs.sort_unstable();
                key = path_shape(&path) + "?";
                for (index, pair) in pairs.iter().enumerate() {
                    if index > 0 {
                        key.push('&');
                    }
                    key.push_str(name_of(pair));
                }
            }
            return Answer::Miss(Miss {
                domain: Some(host.to_string()),
                table: 0,
                key,
                names: Vec::new(),
            });
        }
        if let Some(detail) = detail.as_deref_mut() {
            detail.host.clear();
            detail.host.push_str(host);
            detail.params = !pairs.is_empty();
            detail.kept.clear();
            detail.dropped.clear();
        }
        if pairs.is_empty() {
            out.push_str(origin);
            out.push_str(&path);
            out.push_str(&route);
            if let Some(detail) = detail {
                detail.pattern = path_shape(&path) + "?";
            }
            return Answer::Written(0);
        }
        pairs.sort_unstable();
        // The plans of a mapped domain are keyed by path shape, and a decision names the
        // URL's pattern: neither needs the shape otherwise.
        let prefix = if plans.is_some() || detail.is_some() {
            path_shape(&path) + "?"
        } else {
            String::new()
        };
        if let Some(detail) = detail.as_deref_mut() {
            detail.pattern.clone_from(&prefix);
            for (index, pair) in pairs.iter().enumerate() {
                if index > 0 {
                    detail.pattern.push('&');
                }
                detail.pattern.push_str(name_of(pair));
            }
            detail.dropped = pairs.iter().map(|pair| name_of(pair).to_string()).collect();
        }
        let (table, prefix) = match plans {
            None => (&self.unmapped, ""),
            Some(plans) => (plans, prefix.as_str()),
        };
        let kept = kept_by_plans(table, prefix, pairs);
        let answer = match kept {
            Kept::Slow => Answer::Slow,
            Kept::Miss(key, names) => Answer::Miss(Miss {
                domain: plans.map(|_| host.to_string()),
                table: table.table,
                key,
                names,
            }),
            Kept::Pairs(kept) => {
                out.push_str(origin);
                let mut first = true;
                match matrix_at {
                    None => out.push_str(&path),
                    Some(at) => {
                        out.push_str(&path[..at]);
                        kept.iter()
                            .filter(|pair| pair.starts_with(';'))
                            .for_each(|param| out.push_str(param));
                        out.push_str(&path[at..]);
                    }
                }
                // With a matrix, the pairs starting with ";" went into the path above; without
                // one, a query name may start with ";" too.
                let in_query = |pair: &&&str| matrix_at.is_none() || !pair.starts_with(';');
                for pair in kept.iter().filter(in_query) {
                    out.push(if first { '?' } else { '&' });
                    out.push_str(pair);
                    first = false;
                }
                out.push_str(&route);
                if let Some(detail) = detail {
                    detail.kept = kept.iter().map(|pair| name_of(pair).to_string()).collect();
                    detail.dropped.retain(|name| !detail.kept.contains(name));
                }
                Answer::Written(table.table)
            }
        };
        answer
    }
}

/// `miqps.urls.split_matrix`: the path without its matrix parameters, and those as
/// `(offset where their segment ends in that path, ";name=value")`.
fn split_matrix(path: &str) -> (std::borrow::Cow<'_, str>, Vec<(usize, String)>) {
    let mut bare = String::with_capacity(path.len());
    let mut matrix = Vec::new();
    for (index, segment) in path.split('/').enumerate() {
        if index > 0 {
            bare.push('/');
        }
        let (head, rest) = match segment.find(';') {
            Some(at) => (&segment[..at], &segment[at + 1..]),
            None => (segment, ""),
        };
        if !rest.is_empty() && head != "." && head != ".." && rest.split(';').all(is_matrix_param) {
            let end = bare.len() + head.len();
            matrix.extend(rest.split(';').map(|param| (end, format!(";{param}"))));
            bare.push_str(head);
        } else {
            bare.push_str(segment);
        }
    }
    (std::borrow::Cow::Owned(bare), matrix)
}

/// `name=value` with a token name, `[A-Za-z_][A-Za-z0-9_.-]*`.
fn is_matrix_param(param: &str) -> bool {
    let Some(equals) = param.find('=') else {
        return false;
    };
    let name = &param.as_bytes()[..equals];
    match name.split_first() {
        Some((first, rest)) => {
            (first.is_ascii_alphabetic() || *first == b'_')
                && rest
                    .iter()
                    .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'-'))
        }
        None => false,
    }
}

/// `Canonicalizer._kept_by_plans`: the pairs the plans keep, following moves to other
/// patterns when confirmed default values are left out.
fn kept_by_plans<'a>(table: &Plans, prefix: &str, mut pairs: Strs<'a>) -> Kept<'a> {
    let mut key = String::with_capacity(128);
    loop {
        let names: Strs = pairs.iter().map(|pair| name_of(pair)).collect();
        if !strictly_increasing(&names) {
            return Kept::Slow;
        }
        key.clear();
        key.push_str(prefix);
        for (index, name) in names.iter().enumerate() {
            if index > 0 {
                key.push('&');
            }
            key.push_str(name);
        }
        match apply(table, &key, names, pairs) {
            Applied::Done(kept) => return Kept::Pairs(kept),
            Applied::Slow => return Kept::Slow,
            Applied::Miss(key, names) => return Kept::Miss(key, names),
            Applied::Moved(left) => {
                if left.is_empty() {
                    return Kept::Pairs(left);
                }
                pairs = left;
            }
        }
    }
}

fn apply<'a>(table: &Plans, key: &str, names: Strs, pairs: Strs<'a>) -> Applied<'a> {
    let Some(plan) = table.plans.get(key) else {
        return Applied::Miss(
            key.to_string(),
            names.into_iter().map(str::to_string).collect(),
        );
    };
    match plan {
        Plan::Irregular => Applied::Slow,
        Plan::KeepAll => Applied::Done(pairs),
        Plan::KeepNone => Applied::Done(SmallVec::new()),
        Plan::Pick(kept) => match pick(kept, &pairs) {
            Some(chosen) => Applied::Done(chosen),
            None => Applied::Slow,
        },
        Plan::Elide {
            kept,
            defaults,
            then,
        } => {
            let Some(chosen) = pick(kept, &pairs) else {
                return Applied::Slow;
            };
            let is_default = |pair: &&str| defaults.iter().any(|default| default == pair);
            if chosen.iter().any(is_default) {
                return Applied::Moved(
                    chosen
                        .into_iter()
                        .filter(|pair| !is_default(pair))
                        .collect(),
                );
            }
            match then {
                None => Applied::Done(chosen),
                Some(then_key) => {
                    let then_names: Strs = chosen.iter().map(|pair| name_of(pair)).collect();
                    apply(table, then_key, then_names, chosen)
                }
            }
        }
    }
}

/// The pairs at `indexes`, or None for an index out of range (a plan for other pairs).
fn pick<'a>(indexes: &[usize], pairs: &[&'a str]) -> Option<Strs<'a>> {
    indexes.iter().map(|at| pairs.get(*at).copied()).collect()
}

fn plan_from_spec(spec: &Bound<'_, PyTuple>) -> PyResult<Plan> {
    let kept: Option<Vec<usize>> = spec.get_item(0)?.extract()?;
    let size: usize = spec.get_item(1)?.extract()?;
    let defaults: Vec<String> = spec.get_item(2)?.extract()?;
    let then: Option<String> = spec.get_item(3)?.extract()?;
    let Some(kept) = kept else {
        return Ok(Plan::Irregular);
    };
    if !defaults.is_empty() {
        return Ok(Plan::Elide {
            kept,
            defaults,
            then,
        });
    }
    Ok(if kept.is_empty() {
        Plan::KeepNone
    } else if kept.len() == size {
        Plan::KeepAll
    } else {
        Plan::Pick(kept)
    })
}

#[pymethods]
impl Core {
    #[new]
    fn new() -> Self {
        Core {
            domains: HashMap::default(),
            unmapped: Plans::new(0),
            on_demand: false,
            absent: HashSet::default(),
        }
    }

    /// Whether maps are loaded on demand: then a host without a table is answered with a
    /// miss of table 0 naming it (the caller installs its map or marks it absent) until
    /// `mark_absent` says it has none.
    fn set_on_demand(&mut self, on: bool) {
        self.on_demand = on;
        self.absent.clear();
    }

    /// `domain` has no map: its URLs take the unmapped table.
    fn mark_absent(&mut self, domain: String) {
        if self.absent.len() >= ABSENT_SIZE {
            self.absent.clear();
        }
        self.absent.insert(domain);
    }

    /// For each of `domains`, whether a URL was answered through its table since the last
    /// look (False without a table); the marks are cleared.
    fn take_touched(&self, domains: Vec<String>) -> Vec<bool> {
        domains
            .iter()
            .map(|domain| {
                self.domains
                    .get(domain)
                    .is_some_and(|plans| plans.touched.swap(false, Ordering::Relaxed))
            })
            .collect()
    }

    /// Start an empty plan table numbered `table` for `domain`, whose map has version
    /// `version`, `learned` patterns (pattern, and the names it keeps when it drops one),
    /// the oldest of its decisions made at `oldest_decision`.
    fn install(
        &mut self,
        domain: String,
        table: u64,
        version: u64,
        learned: Vec<(String, Option<Vec<String>>)>,
        oldest_decision: f64,
    ) {
        let mut plans = Plans::new(table);
        plans.map = MapFacts {
            version,
            learned: learned.into_iter().collect(),
            oldest_decision,
        };
        self.absent.remove(&domain);
        self.domains.insert(domain, plans);
    }

    fn forget(&mut self, domain: &str) {
        self.domains.remove(domain);
        self.absent.remove(domain);
    }

    /// Empty every table (the rules changed for every domain); the unmapped one is
    /// numbered `table`.
    fn reset(&mut self, table: u64) {
        self.domains.clear();
        self.absent.clear();
        self.unmapped = Plans::new(table);
    }

    /// Remember the plan `spec` = `(kept indexes or None, size, defaults, then key)` under
    /// `key`, unless the table numbered `table` was replaced since.
    #[pyo3(signature = (domain, table, key, spec))]
    fn add_plan(
        &mut self,
        domain: Option<&str>,
        table: u64,
        key: String,
        spec: &Bound<'_, PyTuple>,
    ) -> PyResult<()> {
        let plan = plan_from_spec(spec)?;
        let plans = match domain {
            None => Some(&mut self.unmapped),
            Some(domain) => self.domains.get_mut(domain),
        };
        if let Some(plans) = plans {
            if plans.table == table {
                plans.insert(key, plan);
            }
        }
        Ok(())
    }

    /// The answers for `texts`, in order (see the module's documentation), and the
    /// indexes of those that are not a canonical URL.
    fn canonical_texts<'py>(
        slf: &Bound<'py, Self>,
        texts: &Bound<'py, PyList>,
    ) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
        let py = slf.py();
        let mut written = String::with_capacity(texts.len() * 96);
        let answers: Vec<(Answer, usize, usize)> = {
            // No Python object is made while the core is borrowed: another thread that
            // installs a map waits for the GIL, never finds the core borrowed.
            let core = slf.borrow();
            let mut answers = Vec::with_capacity(texts.len());
            for item in texts.iter() {
                let start = written.len();
                let answer = match item.downcast::<PyString>()?.to_str() {
                    Ok(text) => core.answer(text, &mut written, None),
                    Err(_) => Answer::Slow,
                };
                answers.push((answer, start, written.len()));
            }
            answers
        };
        let out = PyList::empty(py);
        let mut others = Vec::new();
        for (index, (answer, start, end)) in answers.into_iter().enumerate() {
            if let Answer::Written(_) = answer {
                out.append(PyString::new(py, &written[start..end]))?;
            } else {
                others.push(index);
                out.append(answer.other_into_pyobject(py)?)?;
            }
        }
        Ok((out, others))
    }

    /// For a block of lines (`\n` between them): the output lines in UTF-8, each ended by `\n`, cut
    /// where a line's answer is not a canonical URL (`parts`, one more than those lines),
    /// and for those lines their indexes, texts and answers. None when the block is not
    /// valid UTF-8 (lone surrogates from undecodable input).
    #[allow(clippy::type_complexity)]
    fn canonical_lines<'py>(
        slf: &Bound<'py, Self>,
        block: &Bound<'py, PyString>,
    ) -> PyResult<
        Option<(
            Vec<Bound<'py, PyBytes>>,
            Vec<usize>,
            Vec<String>,
            Bound<'py, PyList>,
        )>,
    > {
        let py = slf.py();
        let Ok(block) = block.to_str() else {
            return Ok(None);
        };
        let mut parts = Vec::new();
        let mut out = String::with_capacity(block.len() + block.len() / 8);
        let mut others = Vec::new();
        let mut texts = Vec::new();
        let mut answers = Vec::new();
        {
            let core = slf.borrow();
            for (index, line) in block.split('\n').enumerate() {
                match core.answer(line, &mut out, None) {
                    Answer::Written(_) => out.push('\n'),
                    answer => {
                        parts.push(std::mem::take(&mut out));
                        others.push(index);
                        texts.push(line.to_string());
                        answers.push(answer);
                    }
                }
            }
        }
        parts.push(out);
        let parts = parts
            .iter()
            .map(|part| PyBytes::new(py, part.as_bytes()))
            .collect();
        let objects = PyList::empty(py);
        for answer in answers {
            objects.append(answer.other_into_pyobject(py)?)?;
        }
        Ok(Some((parts, others, texts, objects)))
    }

    /// The stream front's step for a batch of `urls.raw` values: see `front::batch`.
    #[pyo3(signature = (values, max_bytes, due_before, audit_below, seed))]
    fn front_batch<'py>(
        slf: &Bound<'py, Self>,
        values: &Bound<'py, PyList>,
        max_bytes: usize,
        due_before: f64,
        audit_below: u128,
        seed: &str,
    ) -> PyResult<front::Batch<'py>> {
        front::batch(slf, values, max_bytes, due_before, audit_below, seed)
    }

    /// For one text: `(canonical URL, pattern, kept names, dropped names, plan table
    /// number)`, the names as sorted tuples, or the answer that is not that (None, or a
    /// `Miss`).
    fn decide_text<'py>(slf: &Bound<'py, Self>, text: &str) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let mut written = String::new();
        let mut detail = Detail::default();
        let answer = slf.borrow().answer(text, &mut written, Some(&mut detail));
        match answer {
            Answer::Written(table) => Ok((
                written,
                detail.pattern,
                PyTuple::new(py, detail.kept)?,
                PyTuple::new(py, detail.dropped)?,
                table,
            )
                .into_pyobject(py)?
                .into_any()),
            other => other.other_into_pyobject(py),
        }
    }
}

impl Answer {
    /// An answer that is not a canonical URL, for Python: None, or the `Miss`.
    fn other_into_pyobject(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        Ok(match self {
            Answer::Written(_) | Answer::Slow => py.None().into_bound(py),
            Answer::Miss(miss) => Bound::new(py, miss)?.into_any(),
        })
    }
}

#[pymodule]
fn miqps_native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Core>()?;
    module.add_class::<Miss>()?;
    module.add_function(wrap_pyfunction!(facts::pattern_facts, module)?)?;
    module.add_function(wrap_pyfunction!(facts::pattern_with_wrong_names, module)?)?;
    module.add_function(wrap_pyfunction!(facts::may_hold_fraction, module)?)?;
    Ok(())
}
