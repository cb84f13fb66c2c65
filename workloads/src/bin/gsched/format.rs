//! Output: JSON, units, wrapped text, tables.

use serde_json::Value;

pub(crate) fn to_json(value: &Value) -> Result<String, String> {
    serde_json::to_string_pretty(value)
        .map(|s| s + "\n")
        .map_err(|e| format!("cannot write JSON: {e}"))
}

pub(crate) fn ms(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e6)
}

pub(crate) fn mb(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / 1e6)
}

pub(crate) fn ratio(x: u64, bound: u64) -> String {
    match bound {
        0 => "-".to_string(),
        b => format!("{:.2}x", x as f64 / b as f64),
    }
}

/// Wraps `text` at spaces to lines of at most `width` characters; a lone `/` stays with the word
/// after it (`/ bound`).
pub(crate) fn wrap(text: &str, width: usize) -> String {
    let mut words: Vec<String> = Vec::new();
    let mut glue = false;
    for word in text.split_whitespace() {
        match words.last_mut() {
            Some(last) if glue => *last += &format!(" {word}"),
            _ => words.push(word.to_string()),
        }
        glue = word == "/";
    }
    let mut out = String::new();
    let mut line = String::new();
    for word in &words {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            out += &line;
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line += word.as_str();
    }
    if !line.is_empty() {
        out += &line;
        out.push('\n');
    }
    out
}

/// Aligned columns: the first left-aligned, the others right-aligned unless told.
pub(crate) struct Table {
    pub(crate) header: Vec<String>,
    pub(crate) rows: Vec<Vec<String>>,
    pub(crate) left: Vec<bool>,
}

impl Table {
    pub(crate) fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
            left: (0..header.len()).map(|i| i == 0).collect(),
        }
    }

    pub(crate) fn left_align(&mut self, column: usize) {
        self.left[column] = true;
    }

    pub(crate) fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    pub(crate) fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, (cell, &w)) in cells.iter().zip(&widths).enumerate() {
                if i > 0 {
                    s += "  ";
                }
                if self.left[i] {
                    s += &format!("{cell:<w$}");
                } else {
                    s += &format!("{cell:>w$}");
                }
            }
            s.trim_end().to_string() + "\n"
        };
        let mut out = String::new();
        if self.header.iter().any(|h| !h.is_empty()) {
            out += &line(&self.header);
        }
        for row in &self.rows {
            out += &line(row);
        }
        out
    }
}

/// "s" unless `n` is 1: `format!("{n} thread{}", plural(n))`.
pub(crate) fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
