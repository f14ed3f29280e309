//! Loading hyperplan's YAML files with errors that say `FILE:LINE:COLUMN: FIELD: ...`.
//!
//! Loading is two-step. serde-saphyr first reads every document into a [`Node`] tree
//! that remembers the line and column of each value and key (syntax errors surface
//! here). A small serde [`Deserializer`] over that tree then fills the typed structs;
//! because it walks the tree itself it always knows the dotted field path
//! (`nodes[3].resources.cpu`) and the position of the value it is on, so every type,
//! unit or unknown-field error names both. [`Located`] hands positions to the
//! semantic checks that run after deserialization. The two steps also let a loader
//! look at a document (`apiVersion`, `kind`) before choosing the type to read it as.

use std::fmt;
use std::marker::PhantomData;
use std::path::Path;

use serde::Deserialize;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};
use serde_saphyr::{MessageFormatter, Spanned, UserMessageFormatter};

use crate::error::FileError;

/// A 1-based line and column; `0:0` when unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pos {
    pub line: u64,
    pub column: u64,
}

/// One YAML value with its position.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub pos: Pos,
    pub value: Value,
}

/// Scalars keep their source text so a string field, a quantity or a label value reads
/// what the user wrote (`name: 001` is `"001"`, `cpu: 1.50` is exact), not a re-printed
/// number.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    Null,
    Bool(bool, String),
    UInt(u64, String),
    Int(i64, String),
    Float(f64, String),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Key, Node)>),
}

#[derive(Clone, Debug)]
pub(crate) struct Key {
    pub pos: Pos,
    pub text: String,
}

impl Node {
    /// The value of mapping key `name`, if this is a mapping that has it.
    pub fn get(&self, name: &str) -> Option<&Node> {
        match &self.value {
            Value::Map(entries) => entries.iter().find(|(k, _)| k.text == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The scalar's text (what the user wrote), if this is a non-null scalar.
    pub fn scalar_text(&self) -> Option<&str> {
        match &self.value {
            Value::Bool(_, s) | Value::UInt(_, s) | Value::Int(_, s) | Value::Float(_, s) | Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A short description for "got ..." in messages.
    fn describe(&self) -> String {
        match &self.value {
            Value::Null => "nothing".to_string(),
            Value::Bool(_, s) | Value::UInt(_, s) | Value::Int(_, s) | Value::Float(_, s) | Value::Str(s) => {
                format!("{s:?}")
            }
            Value::Seq(_) => "a list".to_string(),
            Value::Map(_) => "a mapping".to_string(),
        }
    }
}

/// A value deserialized together with where it was written and its field path, for
/// checks that only make sense after the whole document is read (duplicates, sums).
/// Only works with the tree deserializer of this module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Located<T> {
    pub value: T,
    pub pos: Pos,
    pub field: String,
}

/// The newtype-struct name through which [`Located`] asks the tree deserializer for
/// the position and path of the value.
const LOCATED_MARKER: &str = "__hyperplan_located";

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Located<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        LocatedSeed(PhantomData::<T>).deserialize(deserializer)
    }
}

/// Deserializes a [`Located`] whose inner value is read with seed `S`.
pub(crate) struct LocatedSeed<S>(pub S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for LocatedSeed<S> {
    type Value = Located<S::Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        struct V<S>(S);
        impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for V<S> {
            type Value = Located<S::Value>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a located value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let missing = || de::Error::custom("internal: incomplete located value");
                let line: u64 = seq.next_element()?.ok_or_else(missing)?;
                let column: u64 = seq.next_element()?.ok_or_else(missing)?;
                let field: String = seq.next_element()?.ok_or_else(missing)?;
                let value = seq.next_element_seed(self.0)?.ok_or_else(missing)?;
                Ok(Located {
                    value,
                    pos: Pos { line, column },
                    field,
                })
            }
        }
        deserializer.deserialize_newtype_struct(LOCATED_MARKER, V(self.0))
    }
}

/// Builds a [`FileError`]; an empty field path becomes `-` (the whole document).
pub(crate) fn file_error(path: &Path, pos: Pos, field: &str, message: impl Into<String>) -> FileError {
    FileError {
        path: path.to_path_buf(),
        line: pos.line,
        column: pos.column,
        field: if field.is_empty() {
            "-".to_string()
        } else {
            field.to_string()
        },
        message: message.into(),
    }
}

/// Shorthand for an error about a [`Located`] value.
pub(crate) fn located_error<T>(path: &Path, at: &Located<T>, message: impl Into<String>) -> FileError {
    file_error(path, at.pos, &at.field, message)
}

/// Reads a whole file of at most `limit` bytes ([`crate::limits`]); a problem (I/O, too
/// large, not text) is reported at `0:0` for field `-`.
pub(crate) fn read_file(path: &Path, limit: u64, kind: &str) -> Result<String, FileError> {
    crate::limits::read_file_text(path, limit, &format!("the {kind}")).map_err(|e| {
        let hint = match e {
            crate::limits::ReadError::TooLarge { .. } => " (see Limits in README.md)",
            _ => "",
        };
        file_error(path, Pos::default(), "", format!("{e}{hint}"))
    })
}

/// Joins a map key onto a field path.
pub(crate) fn join_key(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// Joins a list index onto a field path.
pub(crate) fn join_index(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

// ---------------------------------------------------------------------------------
// Step 1: text → Node trees.

/// Parses every document of `text` (empty documents are skipped).
pub(crate) fn parse_documents(text: &str, path: &Path) -> Result<Vec<Node>, FileError> {
    let docs: Vec<Spanned<Tree>> =
        serde_saphyr::from_multiple_with_options(text, options_for(text)).map_err(|e| syntax_error(path, &e))?;
    let mut out = Vec::with_capacity(docs.len());
    for doc in docs {
        out.push(convert(doc, text, path, "")?);
    }
    Ok(out)
}

/// Parser limits that grow with the input: a 50,000-node cluster file is ~1.1 M YAML
/// nodes, past serde-saphyr's defaults, while alias expansion (the real bomb) keeps its
/// default caps. Text already in memory cannot make more events than it has bytes.
fn options_for(text: &str) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_events = budget.max_events.max(text.len());
    budget.max_nodes = budget.max_nodes.max(text.len());
    budget.max_total_scalar_bytes = budget.max_total_scalar_bytes.max(text.len());
    // A manifest file holds one document per HyperNode (3,000+ for a 50,000-node fabric).
    budget.max_documents = budget.max_documents.max(text.len() / 16);
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options
}

/// A serde-saphyr error (syntax, duplicate key, limits) as a [`FileError`].
fn syntax_error(path: &Path, e: &serde_saphyr::Error) -> FileError {
    let pos = e
        .location()
        .map(|l| Pos {
            line: l.line(),
            column: l.column(),
        })
        .unwrap_or_default();
    let raw = UserMessageFormatter.format_message(e.without_snippet());
    // Neutralise control characters, as serde-saphyr's own renderer does.
    let message: String = raw.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    file_error(path, pos, "", message)
}

/// What serde-saphyr gives for one node; children keep their spans.
enum Tree {
    Null,
    Bool(bool),
    UInt(u64),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Spanned<Tree>>),
    Map(Vec<(Spanned<Tree>, Spanned<Tree>)>),
}

impl<'de> Deserialize<'de> for Tree {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Tree;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any YAML value")
            }
            fn visit_unit<E>(self) -> Result<Tree, E> {
                Ok(Tree::Null)
            }
            fn visit_none<E>(self) -> Result<Tree, E> {
                Ok(Tree::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Tree, D::Error> {
                Tree::deserialize(d)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Tree, E> {
                Ok(Tree::Bool(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Tree, E> {
                Ok(Tree::UInt(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Tree, E> {
                Ok(Tree::Int(v))
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Tree, E> {
                Ok(Tree::Str(v.to_string()))
            }
            fn visit_i128<E: de::Error>(self, v: i128) -> Result<Tree, E> {
                Ok(Tree::Str(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Tree, E> {
                Ok(Tree::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Tree, E> {
                Ok(Tree::Str(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> Result<Tree, E> {
                Ok(Tree::Str(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tree, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Tree::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tree, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key()? {
                    let value = map.next_value()?;
                    entries.push((key, value));
                }
                Ok(Tree::Map(entries))
            }
        }
        deserializer.deserialize_any(V)
    }
}

fn pos_of<T>(s: &Spanned<T>) -> Pos {
    Pos {
        line: s.referenced.line(),
        column: s.referenced.column(),
    }
}

/// The source text a scalar was written as, if its span is available. An alias
/// (`*name`) reads the text of its anchored definition.
fn source_text(s: &Spanned<Tree>, text: &str) -> Option<String> {
    let span = s.defined.span();
    let start = usize::try_from(span.byte_offset()?).ok()?;
    let len = usize::try_from(span.byte_len()?).ok()?;
    let raw = text.get(start..start.checked_add(len)?)?.trim();
    (!raw.is_empty() && !raw.starts_with(['*', '&', '!'])).then(|| raw.to_string())
}

fn convert(s: Spanned<Tree>, text: &str, path: &Path, field: &str) -> Result<Node, FileError> {
    let pos = pos_of(&s);
    let raw = || source_text(&s, text);
    let value = match &s.value {
        Tree::Null => Value::Null,
        Tree::Bool(b) => Value::Bool(*b, raw().unwrap_or_else(|| b.to_string())),
        Tree::UInt(v) => Value::UInt(*v, raw().unwrap_or_else(|| v.to_string())),
        Tree::Int(v) => Value::Int(*v, raw().unwrap_or_else(|| v.to_string())),
        Tree::Float(v) => Value::Float(*v, raw().unwrap_or_else(|| v.to_string())),
        Tree::Str(_) | Tree::Seq(_) | Tree::Map(_) => Value::Null, // replaced below
    };
    let value = match s.value {
        Tree::Str(v) => Value::Str(v),
        Tree::Seq(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                out.push(convert(item, text, path, &join_index(field, i))?);
            }
            Value::Seq(out)
        }
        Tree::Map(entries) => {
            let mut out: Vec<(Key, Node)> = Vec::with_capacity(entries.len());
            for (k, v) in entries {
                let kpos = pos_of(&k);
                let key_node = convert(k, text, path, field)?;
                let Some(key_text) = key_node.scalar_text().map(str::to_string) else {
                    return Err(file_error(path, kpos, field, "expected a plain (scalar) key"));
                };
                let child = join_key(field, &key_text);
                if let Some((first, _)) = out.iter().find(|(k, _)| k.text == key_text) {
                    return Err(file_error(
                        path,
                        kpos,
                        &child,
                        format!("duplicate key (first at line {})", first.pos.line),
                    ));
                }
                let value = convert(v, text, path, &child)?;
                out.push((
                    Key {
                        pos: kpos,
                        text: key_text,
                    },
                    value,
                ));
            }
            Value::Map(out)
        }
        _ => value,
    };
    Ok(Node { pos, value })
}

// ---------------------------------------------------------------------------------
// Step 2: Node tree → typed values.

/// Deserializes `node` as `T`; `field` is the node's own path ("" for a document root).
pub(crate) fn from_node<T: DeserializeOwned>(node: &Node, field: &str, path: &Path) -> Result<T, FileError> {
    T::deserialize(NodeDe {
        node,
        field: field.to_string(),
    })
    .map_err(|e| {
        let field = match &e.missing {
            Some(name) => join_key(&e.field.clone().unwrap_or_default(), name),
            None => e.field.clone().unwrap_or_default(),
        };
        file_error(path, e.pos.unwrap_or_default(), &field, e.message)
    })
}

/// A deserialization error; position and path are filled in by the innermost node
/// that sees it.
#[derive(Debug)]
pub(crate) struct DeError {
    message: String,
    pos: Option<Pos>,
    field: Option<String>,
    /// Set for a missing field: its name is appended to the path of the mapping.
    missing: Option<&'static str>,
}

impl DeError {
    fn new(message: String) -> Self {
        DeError {
            message,
            pos: None,
            field: None,
            missing: None,
        }
    }

    fn at(mut self, pos: Pos, field: &str) -> Self {
        if self.pos.is_none() {
            self.pos = Some(pos);
            self.field = Some(field.to_string());
        }
        self
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DeError {}

/// Turns serde's type names into words a user of the file understands.
fn plain_expected(exp: &dyn de::Expected) -> String {
    let s = exp.to_string();
    match s.as_str() {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number ≥ 0".to_string(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number".to_string(),
        "f32" | "f64" => "a number".to_string(),
        "a boolean" => "true or false".to_string(),
        "a sequence" => "a list".to_string(),
        "a map" => "a mapping".to_string(),
        _ if s.starts_with("struct ") => "a mapping".to_string(),
        _ if s.starts_with("a sequence") => "a list".to_string(),
        _ => s,
    }
}

fn plain_unexpected(unexp: de::Unexpected) -> String {
    match unexp {
        de::Unexpected::Unsigned(v) => v.to_string(),
        de::Unexpected::Signed(v) => v.to_string(),
        de::Unexpected::Float(v) => v.to_string(),
        de::Unexpected::Str(s) => format!("{s:?}"),
        de::Unexpected::Bool(b) => b.to_string(),
        de::Unexpected::Unit | de::Unexpected::Option => "nothing".to_string(),
        de::Unexpected::Seq => "a list".to_string(),
        de::Unexpected::Map => "a mapping".to_string(),
        other => other.to_string(),
    }
}

fn one_of(names: &'static [&'static str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.len() {
        0 => "no fields here".to_string(),
        1 => quoted.concat(),
        _ => format!("one of {}", quoted.join(", ")),
    }
}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError::new(msg.to_string())
    }

    fn invalid_type(unexp: de::Unexpected, exp: &dyn de::Expected) -> Self {
        DeError::new(format!(
            "expected {}, got {}",
            plain_expected(exp),
            plain_unexpected(unexp)
        ))
    }

    fn invalid_value(unexp: de::Unexpected, exp: &dyn de::Expected) -> Self {
        DeError::new(format!(
            "expected {}, got {}",
            plain_expected(exp),
            plain_unexpected(unexp)
        ))
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        DeError::new(format!("expected {}, got {variant:?}", one_of(expected)))
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        DeError::new(format!("unknown field `{field}`, expected {}", one_of(expected)))
    }

    fn missing_field(field: &'static str) -> Self {
        let mut e = DeError::new(format!("missing field `{field}`"));
        e.missing = Some(field);
        e
    }
}

/// The tree deserializer: one node plus its field path.
struct NodeDe<'a> {
    node: &'a Node,
    field: String,
}

impl<'a> NodeDe<'a> {
    fn wrap<T>(&self, r: Result<T, DeError>) -> Result<T, DeError> {
        r.map_err(|e| e.at(self.node.pos, &self.field))
    }
}

impl<'de, 'a> Deserializer<'de> for NodeDe<'a> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let r = match &self.node.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b, _) => visitor.visit_bool(*b),
            Value::UInt(v, _) => visitor.visit_u64(*v),
            Value::Int(v, _) => visitor.visit_i64(*v),
            Value::Float(v, _) => visitor.visit_f64(*v),
            Value::Str(s) => visitor.visit_str(s),
            Value::Seq(items) => visitor.visit_seq(SeqDe {
                items: items.iter().enumerate(),
                parent: &self.field,
            }),
            Value::Map(entries) => visitor.visit_map(MapDe {
                entries: entries.iter(),
                parent: &self.field,
                value: None,
            }),
        };
        self.wrap(r)
    }

    /// Strings read the source text, so numbers and booleans work as names and labels.
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.node.scalar_text() {
            Some(text) => {
                let r = visitor.visit_str(text);
                self.wrap(r)
            }
            None => self.deserialize_any(visitor),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.node.value {
            Value::Null => {
                let r = visitor.visit_none();
                self.wrap(r)
            }
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, DeError> {
        if name == LOCATED_MARKER {
            let r = visitor.visit_seq(LocatedDe {
                de: Some(self.node),
                field: &self.field,
                step: 0,
            });
            return self.wrap(r);
        }
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let r = match self.node.scalar_text() {
            Some(text) => visitor.visit_enum(IntoDeserializer::<DeError>::into_deserializer(text)),
            None => Err(DeError::new(format!("expected a name, got {}", self.node.describe()))),
        };
        self.wrap(r)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct
    }
}

struct SeqDe<'a, I> {
    items: I,
    parent: &'a str,
}

impl<'de, 'a, I: Iterator<Item = (usize, &'a Node)>> SeqAccess<'de> for SeqDe<'a, I> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, DeError> {
        match self.items.next() {
            Some((i, node)) => seed
                .deserialize(NodeDe {
                    node,
                    field: join_index(self.parent, i),
                })
                .map(Some),
            None => Ok(None),
        }
    }
}

struct MapDe<'a, I> {
    entries: I,
    parent: &'a str,
    value: Option<(&'a Node, String)>,
}

impl<'de, 'a, I: Iterator<Item = &'a (Key, Node)>> MapAccess<'de> for MapDe<'a, I> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, DeError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        let field = join_key(self.parent, &key.text);
        let r = seed.deserialize(IntoDeserializer::<DeError>::into_deserializer(key.text.as_str()));
        let k = r.map_err(|e| e.at(key.pos, &field))?;
        self.value = Some((value, field));
        Ok(Some(k))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        match self.value.take() {
            Some((node, field)) => seed.deserialize(NodeDe { node, field }),
            None => Err(DeError::new("internal: value requested before key".to_string())),
        }
    }
}

/// Feeds [`LocatedSeed`] the line, column, field path, then the value itself.
struct LocatedDe<'a> {
    de: Option<&'a Node>,
    field: &'a str,
    step: u8,
}

impl<'de, 'a> SeqAccess<'de> for LocatedDe<'a> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, DeError> {
        let Some(node) = self.de else { return Ok(None) };
        self.step += 1;
        match self.step {
            1 => seed.deserialize(node.pos.line.into_deserializer()).map(Some),
            2 => seed.deserialize(node.pos.column.into_deserializer()).map(Some),
            3 => seed.deserialize(self.field.into_deserializer()).map(Some),
            _ => {
                self.de = None;
                seed.deserialize(NodeDe {
                    node,
                    field: self.field.to_string(),
                })
                .map(Some)
            }
        }
    }
}

/// Quotes `s` for YAML output when it would not read back as the same plain string.
pub(crate) fn scalar(s: &str) -> String {
    let plain_safe = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        && s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n" | "nan" | "inf"
        );
    if plain_safe {
        s.to_string()
    } else {
        serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
    }
}
