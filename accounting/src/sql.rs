//! The SQL both backends speak: statements with `$1, $2, …` placeholders (PostgreSQL's
//! form; SQLite reads `$1` as a parameter named `1`, numbered in order of first use, so
//! [`Sql`] always numbers in that order) and typed values, so that a NULL has a type
//! PostgreSQL accepts.

/// One value bound to a placeholder, or read from a column.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// BIGINT.
    Int(Option<i64>),
    /// DOUBLE PRECISION.
    Real(Option<f64>),
    /// TEXT.
    Text(Option<String>),
}

impl Value {
    pub fn int(v: impl TryInto<i64>) -> Self {
        Value::Int(v.try_into().ok())
    }

    pub fn opt_int<T: TryInto<i64>>(v: Option<T>) -> Self {
        Value::Int(v.and_then(|v| v.try_into().ok()))
    }

    pub fn text(v: impl Into<String>) -> Self {
        Value::Text(Some(v.into()))
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(v) => *v,
            Value::Real(v) => v.map(|f| f as i64),
            Value::Text(_) => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        self.as_i64().and_then(|v| u64::try_from(v).ok())
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(v) => v.map(|i| i as f64),
            Value::Real(v) => *v,
            Value::Text(_) => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Text(Some(s)) => Some(s),
            _ => None,
        }
    }

    pub fn into_string(self) -> Option<String> {
        match self {
            Value::Text(s) => s,
            _ => None,
        }
    }
}

/// What a column of a result holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Int,
    Real,
    Text,
}

/// A statement and its values, built in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sql {
    pub text: String,
    pub params: Vec<Value>,
}

impl Sql {
    pub fn new(text: &str) -> Self {
        Self {
            text: text.to_string(),
            params: Vec::new(),
        }
    }

    /// Appends text.
    pub fn push(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    /// Appends a placeholder for `value`.
    pub fn bind(&mut self, value: Value) -> &mut Self {
        self.params.push(value);
        self.text.push('$');
        self.text.push_str(&self.params.len().to_string());
        self
    }

    /// Appends `(v1, v2, …)` for an `IN`.
    pub fn bind_list(&mut self, values: impl IntoIterator<Item = Value>) -> &mut Self {
        self.text.push('(');
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                self.text.push_str(", ");
            }
            self.bind(v);
        }
        self.text.push(')');
        self
    }
}

/// `INSERT INTO table (cols) VALUES ($1…) ON CONFLICT (key) DO UPDATE SET col = excluded.col, …`:
/// one row, written again with the same key, ends as the newest write.
pub fn upsert(table: &str, columns: &[&str], key: &[&str], values: Vec<Value>) -> Sql {
    debug_assert_eq!(columns.len(), values.len());
    let mut sql = Sql::new(&format!("INSERT INTO {table} ({}) VALUES (", columns.join(", ")));
    for (i, v) in values.into_iter().enumerate() {
        if i > 0 {
            sql.push(", ");
        }
        sql.bind(v);
    }
    sql.push(&format!(") ON CONFLICT ({}) DO UPDATE SET ", key.join(", ")));
    let set: Vec<String> = columns
        .iter()
        .filter(|c| !key.contains(c))
        .map(|c| format!("{c} = excluded.{c}"))
        .collect();
    sql.push(&set.join(", "));
    sql
}

/// Rows per multi-row upsert, largest first: a page of jobs is written in few statements
/// (a round trip each on PostgreSQL) of few distinct shapes (each prepared once).
const CHUNKS: [usize; 5] = [256, 64, 16, 4, 1];

/// [`upsert`] of many rows: `INSERT … VALUES (…), (…), … ON CONFLICT …`, in chunks of
/// [`CHUNKS`] rows. Keys must not repeat among `rows` (one statement may not update a row
/// twice).
pub fn upsert_many(table: &str, columns: &[&str], key: &[&str], rows: Vec<Vec<Value>>) -> Vec<Sql> {
    let set: Vec<String> = columns
        .iter()
        .filter(|c| !key.contains(c))
        .map(|c| format!("{c} = excluded.{c}"))
        .collect();
    let tail = format!(" ON CONFLICT ({}) DO UPDATE SET {}", key.join(", "), set.join(", "));
    let mut out = Vec::new();
    let mut rows = rows.into_iter().peekable();
    let mut left = rows.len();
    while left > 0 {
        let n = CHUNKS.into_iter().find(|&c| c <= left).unwrap_or(1);
        let mut sql = Sql::new(&format!("INSERT INTO {table} ({}) VALUES ", columns.join(", ")));
        for (r, values) in rows.by_ref().take(n).enumerate() {
            debug_assert_eq!(columns.len(), values.len());
            sql.push(if r == 0 { "(" } else { ", (" });
            for (i, v) in values.into_iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                sql.bind(v);
            }
            sql.push(")");
        }
        sql.push(&tail);
        out.push(sql);
        left -= n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_in_order() {
        let mut s = Sql::new("SELECT 1 WHERE a = ");
        s.bind(Value::int(3)).push(" AND b IN ");
        s.bind_list([Value::text("x"), Value::text("y")]);
        assert_eq!(s.text, "SELECT 1 WHERE a = $1 AND b IN ($2, $3)");
        assert_eq!(s.params.len(), 3);
    }

    #[test]
    fn many_rows_go_in_chunks_of_few_shapes() {
        let rows: Vec<Vec<Value>> = (0..7).map(|i| vec![Value::int(i), Value::int(i * 2)]).collect();
        let s = upsert_many("t", &["k", "a"], &["k"], rows);
        assert_eq!(s.len(), 4, "4 + 1 + 1 + 1");
        assert_eq!(
            s[0].text,
            "INSERT INTO t (k, a) VALUES ($1, $2), ($3, $4), ($5, $6), ($7, $8) ON CONFLICT (k) DO UPDATE SET a = excluded.a"
        );
        assert_eq!(s[0].params.len(), 8);
        assert_eq!(s[3].params[0], Value::int(6));
    }

    #[test]
    fn upsert_updates_every_column_but_the_key() {
        let s = upsert(
            "t",
            &["k", "a", "b"],
            &["k"],
            vec![Value::int(1), Value::int(2), Value::text("z")],
        );
        assert_eq!(
            s.text,
            "INSERT INTO t (k, a, b) VALUES ($1, $2, $3) ON CONFLICT (k) DO UPDATE SET a = excluded.a, b = excluded.b"
        );
    }
}
