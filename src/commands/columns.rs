//! Left-aligned text columns, two spaces apart, the last column unpadded: the style of the
//! simulator's job table (`hyperplan_planner::sim::render_table`).

/// One line per row; widths count characters, so tree indentation and names line up.
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

/// `free/total`.
pub fn ratio(free: impl std::fmt::Display, total: impl std::fmt::Display) -> String {
    format!("{free}/{total}")
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
}
