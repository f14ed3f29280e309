//! Left-aligned text columns, two spaces apart, the last column unpadded: the one table
//! style of every listing people read (the simulator's job and task tables, the CLI's
//! nodes, HyperNodes and explain), kept in one place so they cannot drift apart.

/// One line per row; widths count characters, so tree indentation and names line up.
/// Trailing spaces are trimmed, so an empty last cell leaves no padding behind.
pub fn columns<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 < N {
                line.push_str(&format!("{cell:<w$}  "));
            } else {
                line.push_str(cell);
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
}
