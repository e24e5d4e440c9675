//! The walks over a whole map document that storing a map makes, compiled: the facts of its
//! patterns (`miqps.canonical.facts_record_of_document`), and the checks of
//! `miqps.maps.check_map` that read every pattern or every byte. Restoring a maps
//! partition makes them for each of its maps. They take the document as the JSON parser
//! gave it, after the map schema was checked. The Python functions are the reference: a
//! differential test holds both to the same answers.

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyList, PyString};
use smallvec::SmallVec;

/// `miqps.maps.Layer.INSUFFICIENT` and `Layer.LEARNED`.
const INSUFFICIENT: &str = "insufficient-evidence";
const LEARNED: &str = "learned";

/// What `pattern_facts` returns: the patterns' facts as JSON, the names learned to keep
/// (sorted) and when each pattern was decided.
type Facts<'py> = (Bound<'py, PyBytes>, Bound<'py, PyList>, Bound<'py, PyDict>);

/// The strings of `list`.
fn strings<'py>(list: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyString>>> {
    let list = list.downcast::<PyList>()?;
    let mut items = Vec::with_capacity(list.len());
    for item in list.iter() {
        let item = item.downcast_into::<PyString>()?;
        item.to_str()?; // refuses a lone surrogate, so that the unwraps below cannot fail
        items.push(item);
    }
    Ok(items)
}

fn item<'py>(
    mapping: &Bound<'py, PyDict>,
    key: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    mapping
        .get_item(key)?
        .ok_or_else(|| PyTypeError::new_err(format!("no {key} in a map document's pattern")))
}

fn is(value: &Bound<'_, PyAny>, text: &str) -> PyResult<bool> {
    Ok(value.downcast::<PyString>()?.to_str()? == text)
}

/// `text` as a JSON string, escaped as orjson escapes it: `"`, `\` and the control
/// characters (short forms where JSON has them), every other character as it is.
fn write_string(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for &byte in text.as_bytes() {
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0..=0x1f => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(byte >> 4)]);
                out.push(HEX[usize::from(byte & 15)]);
            }
            _ => out.push(byte),
        }
    }
    out.push(b'"');
}

/// The texts of `strings` (each checked by `strings` or by its caller: never empty here
/// for want of UTF-8).
fn texts<'a, 'py>(strings: &'a [Bound<'py, PyString>]) -> impl Iterator<Item = &'a str> {
    strings.iter().map(|text| text.to_str().unwrap_or_default())
}

/// The distinct texts of `items`, sorted as Python sorts strings (by code point, which is
/// UTF-8's byte order).
fn distinct<'a>(items: impl Iterator<Item = &'a str>) -> SmallVec<[&'a str; 8]> {
    let mut texts: SmallVec<[&str; 8]> = items.collect();
    texts.sort_unstable();
    texts.dedup();
    texts
}

/// `texts` as a JSON array of strings.
fn write_array<'a>(out: &mut Vec<u8>, texts: impl IntoIterator<Item = &'a str>) {
    out.push(b'[');
    for (at, text) in texts.into_iter().enumerate() {
        if at > 0 {
            out.push(b',');
        }
        write_string(out, text);
    }
    out.push(b']');
}

/// Of each pattern of a map document's `patterns`, what its facts record holds, as the
/// JSON object orjson writes of it: its kept names, its dropped names and its names
/// without enough evidence (each sorted, without repeats), the confirmed default values of
/// its names, when it was decided and the URLs it saw. With it, the names some pattern
/// learned to keep, sorted, and when each pattern was decided.
#[pyfunction]
pub(crate) fn pattern_facts<'py>(
    py: Python<'py>,
    patterns: &Bound<'py, PyDict>,
) -> PyResult<Facts<'py>> {
    let (params_key, layer_key, decision_key) = (
        intern!(py, "params"),
        intern!(py, "layer"),
        intern!(py, "decision"),
    );
    let (defaults_key, decided_key, seen_key) = (
        intern!(py, "default_values"),
        intern!(py, "decided_at"),
        intern!(py, "urls_seen"),
    );
    let (kept_key, dropped_key) = (intern!(py, "kept"), intern!(py, "dropped"));
    let decided = PyDict::new(py);
    let mut learned: Vec<Bound<'py, PyString>> = Vec::new();
    let mut out: Vec<u8> = Vec::with_capacity(128 * patterns.len() + 2);
    out.push(b'{');
    for (at, (key, decision)) in patterns.iter().enumerate() {
        let key = key.downcast_into::<PyString>()?;
        let decision = decision.downcast_into::<PyDict>()?;
        let params = item(&decision, params_key)?.downcast_into::<PyDict>()?;
        let kept = strings(&item(&decision, kept_key)?)?;
        let dropped = strings(&item(&decision, dropped_key)?)?;
        let decided_at = item(&decision, decided_key)?.downcast_into::<PyString>()?;
        let urls_seen: i64 = match decision.get_item(seen_key)? {
            None => 0,
            Some(seen) => seen.downcast::<PyInt>()?.extract()?,
        };
        if at > 0 {
            out.push(b',');
        }
        write_string(&mut out, key.to_str()?);
        out.push(b':');
        out.push(b'[');
        write_array(&mut out, distinct(texts(&kept)));
        out.push(b',');
        write_array(&mut out, distinct(texts(&dropped)));
        out.push(b',');
        let mut without: Vec<Bound<'py, PyString>> = Vec::new();
        let mut defaults: Vec<u8> = Vec::new();
        for (name, evidence) in params.iter() {
            let name = name.downcast_into::<PyString>()?;
            let text = name.to_str()?;
            let evidence = evidence.downcast_into::<PyDict>()?;
            let layer = item(&evidence, layer_key)?;
            if let Some(values) = evidence.get_item(defaults_key)?.filter(|v| !v.is_none()) {
                let values = strings(&values)?;
                if !values.is_empty() {
                    defaults.push(if defaults.is_empty() { b'{' } else { b',' });
                    write_string(&mut defaults, text);
                    defaults.push(b':');
                    write_array(&mut defaults, texts(&values));
                }
            }
            if is(&layer, INSUFFICIENT)? {
                without.push(name);
            } else if is(&layer, LEARNED)? && is(&item(&evidence, decision_key)?, "keep")? {
                learned.push(name);
            }
        }
        write_array(&mut out, distinct(texts(&without)));
        out.push(b',');
        if defaults.is_empty() {
            out.extend_from_slice(b"{}");
        } else {
            out.extend_from_slice(&defaults);
            out.push(b'}');
        }
        out.push(b',');
        write_string(&mut out, decided_at.to_str()?);
        out.push(b',');
        out.extend_from_slice(urls_seen.to_string().as_bytes());
        out.push(b']');
        decided.set_item(key, decided_at)?;
    }
    out.push(b'}');
    learned.sort_unstable_by(|a, b| {
        a.to_str()
            .unwrap_or_default()
            .cmp(b.to_str().unwrap_or_default())
    });
    learned.dedup_by(|a, b| a.to_str().ok() == b.to_str().ok());
    Ok((PyBytes::new(py, &out), PyList::new(py, learned)?, decided))
}

/// The first pattern of a map document's `patterns` whose kept and dropped names are not
/// the names of its key (each name once: kept or dropped), None if every one is. A key
/// without parameters (`"/p?"`, `"/p"`) keeps and drops nothing.
#[pyfunction]
pub(crate) fn pattern_with_wrong_names<'py>(
    py: Python<'py>,
    patterns: &Bound<'py, PyDict>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let (kept_key, dropped_key) = (intern!(py, "kept"), intern!(py, "dropped"));
    for (key, decision) in patterns.iter() {
        let decision = decision.downcast_into::<PyDict>()?;
        let key_text = key.downcast::<PyString>()?.to_str()?;
        let names = distinct(
            key_text
                .split_once('?')
                .map_or("", |(_, query)| query)
                .split('&'),
        );
        let kept_items = strings(&item(&decision, kept_key)?)?;
        let dropped_items = strings(&item(&decision, dropped_key)?)?;
        let kept = distinct(texts(&kept_items));
        let dropped = distinct(texts(&dropped_items));
        let overlap = kept.iter().any(|name| dropped.binary_search(name).is_ok());
        let either = distinct(kept.iter().chain(dropped.iter()).copied());
        let bare = kept.is_empty() && dropped.is_empty() && names.as_slice() == [""];
        if overlap || (either != names && !bare) {
            return Ok(Some(key.clone()));
        }
    }
    Ok(None)
}

fn is_blank(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\r' | b'\n')
}

/// Whether the JSON text `raw` may hold a number with a fraction or an exponent: a digit
/// then `.`, `e` or `E`, where the digits before it start a value (after `:`, `[` or `,`,
/// blanks and a minus sign). As `miqps.maps._may_hold_fraction`: a string that only looks
/// like such a value says yes too.
#[pyfunction]
pub(crate) fn may_hold_fraction(raw: &[u8]) -> bool {
    for at in 0..raw.len().saturating_sub(1) {
        if !(raw[at].is_ascii_digit() && matches!(raw[at + 1], b'.' | b'e' | b'E')) {
            continue;
        }
        let mut start = at;
        while start > 0 && raw[start - 1].is_ascii_digit() {
            start -= 1;
        }
        if start > 0 && raw[start - 1] == b'-' {
            start -= 1;
        }
        while start > 0 && is_blank(raw[start - 1]) {
            start -= 1;
        }
        if start == 0 || matches!(raw[start - 1], b':' | b'[' | b',') {
            return true;
        }
    }
    false
}
