//! Left-aligned text columns, two spaces apart, the last column unpadded: the one table
//! style of every listing people read (the simulator's job and task tables, the CLI's
//! nodes, HyperNodes and explain), kept in one place so they cannot drift apart.

use crate::names::{escape, shorten};

/// Widest cell, in characters: longer ones (a 70,000-character name, the hostlist of an
/// 18,000-node job) end in `…`. Tables are for reading; `--output json` has it all.
pub const MAX_CELL: usize = 1024;

/// One line per row; widths count characters, so tree indentation and names line up.
/// Trailing spaces are trimmed, so an empty last cell leaves no padding behind. Cells are
/// printed escaped ([`crate::names::escape`]) and cut to [`MAX_CELL`]: any content renders.
pub fn columns<const N: usize>(rows: &[[String; N]]) -> String {
    columns_of(rows)
}

/// [`columns`] for rows whose width is chosen at run time (`history --format`); a row
/// shorter than the widest ends early.
pub fn columns_of<R: AsRef<[String]>>(rows: &[R]) -> String {
    let cells: Vec<Vec<(String, usize)>> = rows
        .iter()
        .map(|row| {
            row.as_ref()
                .iter()
                .map(|cell| {
                    let shown = shorten(&escape(cell), MAX_CELL);
                    let width = shown.chars().count();
                    (shown, width)
                })
                .collect()
        })
        .collect();
    let mut widths = vec![0usize; cells.iter().map(Vec::len).max().unwrap_or(0)];
    for row in &cells {
        for (w, (_, width)) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(*width);
        }
    }
    let mut out = String::new();
    for row in &cells {
        let mut line = String::new();
        for (i, ((cell, width), w)) in row.iter().zip(&widths).enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                // Padded by hand: `format!` widths stop at 65,535.
                line.extend(std::iter::repeat_n(' ', w - width + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_all_but_the_last_column() {
        let rows = [
            ["A".to_string(), "BB".to_string(), "C".to_string()],
            ["long".to_string(), "x".to_string(), String::new()],
        ];
        assert_eq!(columns(&rows), "A     BB  C\nlong  x\n");
    }

    #[test]
    fn widths_count_characters_not_bytes() {
        let rows = [
            ["└─ a".to_string(), "1".to_string()],
            ["bbbbb".to_string(), "2".to_string()],
        ];
        assert_eq!(columns(&rows), "└─ a   1\nbbbbb  2\n");
    }

    /// Issue 12 item 1: a 70,000-character cell panicked in `format!` (width > 65,535).
    #[test]
    fn a_huge_cell_is_cut_not_a_panic() {
        let rows = [
            ["x".repeat(70_000), "1".to_string()],
            ["b".to_string(), "y".repeat(70_000)],
        ];
        let out = columns(&rows);
        for line in out.lines() {
            assert!(line.chars().count() <= 2 * MAX_CELL + 2, "{}", line.len());
        }
        assert!(out.contains('…'), "{out}");
    }

    /// Issue 12 item 8: names and reasons never reach the terminal raw.
    #[test]
    fn control_characters_are_escaped() {
        let rows = [["a\u{1b}[2J".to_string(), "r\nforged row\u{202e}".to_string()]];
        assert_eq!(columns(&rows), "a\\u{1b}[2J  r\\nforged row\\u{202e}\n");
    }
}
