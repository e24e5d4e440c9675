//! The stream front's per-message step (`streams.front.loop`), for the messages it can
//! take whole: a `urls.raw` value that is a plain URL, whose decision asks nothing more of
//! the front than its `urls.canonical` record. That is a URL of a learned pattern whose
//! re-verification is not due and whose item is not chosen for an audit, or one without
//! parameters. Every other message goes back to the Python front, which takes it from
//! the start; a test holds the records written here to the Python front's bytes.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use xxhash_rust::xxh3::xxh3_64;

use crate::{Answer, Core, Detail};

const JSON_STARTS: &[u8] = b"{[\"";
const WHITESPACE: &[u8] = b" \t\r\n";
/// Seconds of slack on the due check: the Python front decides exactly what is due.
const DUE_SLACK: f64 = 1.0;

/// What `batch` returns: the records (or other answers), their keys, the indexes of the
/// other answers, and how many records are of learned patterns.
pub(crate) type Batch<'py> = (Bound<'py, PyList>, Bound<'py, PyList>, Vec<usize>, usize);

enum Outcome {
    /// The record is `records[start..key]`, its key (the canonical URL) `records[key..end]`.
    Record {
        start: usize,
        key: usize,
        end: usize,
    },
    Python,
    Miss(Answer),
}

/// For each of `values`, the `urls.canonical` record (bytes), None for the Python front,
/// or a miss (see `Answer`); the records' keys (None elsewhere); the indexes of the
/// answers that are not records; and how many records are of learned patterns.
///
/// `due_before`: a learned pattern decided at or before then may be due for
/// re-verification. `audit_below`: an item whose digest is below it is chosen for an
/// audit (0: no audits); `seed` is the audit rule's.
pub(crate) fn batch<'py>(
    slf: &Bound<'py, Core>,
    values: &Bound<'py, PyList>,
    max_bytes: usize,
    due_before: f64,
    audit_below: u128,
    seed: &str,
) -> PyResult<Batch<'py>> {
    let py = slf.py();
    let mut records: Vec<u8> = Vec::with_capacity(values.len() * 320);
    let mut outcomes = Vec::with_capacity(values.len());
    let mut learned_records = 0;
    {
        // No Python object is made while the core is borrowed (see `canonical_texts`).
        let core = slf.borrow();
        let mut canonical = String::with_capacity(256);
        let mut detail = Detail::default();
        let mut hashed = String::with_capacity(256);
        for item in values.iter() {
            let Ok(value) = item.downcast::<PyBytes>() else {
                outcomes.push(Outcome::Python);
                continue;
            };
            let Some(text) = plain_url(value.as_bytes(), max_bytes) else {
                outcomes.push(Outcome::Python);
                continue;
            };
            canonical.clear();
            let answer = core.answer(text, &mut canonical, Some(&mut detail));
            if !matches!(answer, Answer::Written(_)) {
                outcomes.push(match answer {
                    Answer::Miss(_) => Outcome::Miss(answer),
                    _ => Outcome::Python,
                });
                continue;
            }
            let facts = core.domains.get(&detail.host).map(|plans| &plans.map);
            let learned = facts.and_then(|facts| facts.learned.get(&detail.pattern));
            if let (Some(facts), Some(audit_kept)) = (facts, learned) {
                if facts.oldest_decision <= due_before + DUE_SLACK {
                    outcomes.push(Outcome::Python);
                    continue;
                }
                if audit_below > 0 && !detail.dropped.is_empty() {
                    if let Some(kept) = audit_kept {
                        // The item is the URL with only the kept names of its pattern: the
                        // canonical URL when the decision kept exactly those.
                        if *kept != detail.kept {
                            outcomes.push(Outcome::Python);
                            continue;
                        }
                        hashed.clear();
                        hashed.push_str(seed);
                        hashed.push('\t');
                        hashed.push_str(&canonical);
                        if u128::from(xxh3_64(hashed.as_bytes())) < audit_below {
                            outcomes.push(Outcome::Python);
                            continue;
                        }
                    }
                }
            } else if detail.params {
                outcomes.push(Outcome::Python); // the local sampler counts it
                continue;
            }
            let start = records.len();
            let version = facts.map_or(0, |facts| facts.version);
            if !write_record(
                &mut records,
                text,
                &canonical,
                &detail,
                learned.is_some(),
                version,
            ) {
                records.truncate(start);
                outcomes.push(Outcome::Python);
                continue;
            }
            let key = records.len();
            records.extend_from_slice(canonical.as_bytes());
            if learned.is_some() {
                learned_records += 1;
            }
            outcomes.push(Outcome::Record {
                start,
                key,
                end: records.len(),
            });
        }
    }
    let out = PyList::empty(py);
    let keys = PyList::empty(py);
    let mut others = Vec::new();
    for (index, outcome) in outcomes.into_iter().enumerate() {
        match outcome {
            Outcome::Record { start, key, end } => {
                out.append(PyBytes::new(py, &records[start..key]))?;
                keys.append(PyBytes::new(py, &records[key..end]))?;
            }
            Outcome::Python => {
                others.push(index);
                out.append(py.None())?;
                keys.append(py.None())?;
            }
            Outcome::Miss(answer) => {
                others.push(index);
                out.append(answer.other_into_pyobject(py)?)?;
                keys.append(py.None())?;
            }
        }
    }
    Ok((out, keys, others, learned_records))
}

/// The text of a value that `streams.messages.decode_input` reads as a plain URL (not an
/// envelope), as it reads it: nothing to strip, not too large, valid UTF-8.
fn plain_url(value: &[u8], max_bytes: usize) -> Option<&str> {
    let (first, last) = (value.first()?, value.last()?);
    if value.len() > max_bytes
        || WHITESPACE.contains(first)
        || WHITESPACE.contains(last)
        || JSON_STARTS.contains(first)
    {
        return None;
    }
    std::str::from_utf8(value).ok()
}

/// `CanonicalOutput.encode` (orjson) of a record without meta; false if a text needs an
/// escape other than `\"` and `\\` (the Python front writes those).
fn write_record(
    out: &mut Vec<u8>,
    text: &str,
    canonical: &str,
    detail: &Detail,
    learned: bool,
    version: u64,
) -> bool {
    let mut plain = true;
    out.extend_from_slice(b"{\"url\":");
    plain &= push_string(out, text);
    out.extend_from_slice(b",\"canonical_url\":");
    plain &= push_string(out, canonical);
    out.extend_from_slice(b",\"domain\":");
    plain &= push_string(out, &detail.host);
    out.extend_from_slice(b",\"pattern\":");
    plain &= push_string(out, &detail.pattern);
    out.extend_from_slice(b",\"kept\":");
    plain &= push_strings(out, &detail.kept);
    out.extend_from_slice(b",\"dropped\":");
    plain &= push_strings(out, &detail.dropped);
    out.extend_from_slice(if learned {
        b",\"status\":\"learned\",\"map_version\":"
    } else {
        b",\"status\":\"provisional\",\"map_version\":"
    });
    out.extend_from_slice(version.to_string().as_bytes());
    out.extend_from_slice(b",\"meta\":null}");
    plain
}

fn push_strings(out: &mut Vec<u8>, items: &[String]) -> bool {
    out.push(b'[');
    let mut plain = true;
    for (index, item) in items.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        plain &= push_string(out, item);
    }
    out.push(b']');
    plain
}

fn push_string(out: &mut Vec<u8>, text: &str) -> bool {
    out.push(b'"');
    for byte in text.bytes() {
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0..=0x1f => return false,
            _ => out.push(byte),
        }
    }
    out.push(b'"');
    true
}
