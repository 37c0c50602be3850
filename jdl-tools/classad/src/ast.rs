//! Expression trees and ClassAds.
//!
//! Attribute names are interned into [`Sym`]s (case-folded), so lookups in an
//! ad are a binary search over integers, never a string hash or compare.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock, RwLock};

pub use crate::lexer::Pos;
use crate::literal::{display_real, quote_str};

/// An interned, case-folded attribute name.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sym(pub u32);

#[derive(Default)]
struct Interner {
    /// Case-folded name -> symbol.
    ids: HashMap<Box<str>, u32>,
    /// Exact spelling -> symbol and a shared copy of the spelling, so that
    /// thousands of ads naming the same attribute share one string.
    spelled: HashMap<Box<str>, (Sym, Arc<str>)>,
}

fn interner() -> &'static RwLock<Interner> {
    static I: OnceLock<RwLock<Interner>> = OnceLock::new();
    I.get_or_init(Default::default)
}

impl Sym {
    /// The symbol of a name and a shared copy of its spelling.
    pub fn intern(name: &str) -> (Sym, Arc<str>) {
        if let Some(e) = interner().read().unwrap_or_else(|e| e.into_inner()).spelled.get(name) {
            return e.clone();
        }
        let sym = Sym::of(name);
        let mut w = interner().write().unwrap_or_else(|e| e.into_inner());
        w.spelled.entry(name.into()).or_insert_with(|| (sym, Arc::from(name))).clone()
    }

    /// The symbol of an attribute name (case-insensitive).
    pub fn of(name: &str) -> Sym {
        let folded = name.to_ascii_lowercase();
        if let Some(&id) = interner().read().unwrap_or_else(|e| e.into_inner()).ids.get(folded.as_str()) {
            return Sym(id);
        }
        let mut w = interner().write().unwrap_or_else(|e| e.into_inner());
        let n = w.ids.len() as u32;
        Sym(*w.ids.entry(folded.into_boxed_str()).or_insert(n))
    }
}

/// Where an attribute reference looks.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Unqualified: the current ad, then enclosing ads (and, in matchmaking, the other ad).
    Plain,
    /// `my.`: the ad being evaluated.
    My,
    /// `other.` / `target.`: the ad being matched against.
    Target,
    /// `parent.`: the enclosing ad.
    Parent,
}

/// Unary operators.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum UnOp {
    /// `-`
    Neg,
    /// `+`
    Plus,
    /// `!`
    Not,
    /// `~`
    BitNot,
}

/// Binary operators.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `||`
    Or,
    /// `&&`
    And,
    /// `|`
    BitOr,
    /// `^`
    BitXor,
    /// `&`
    BitAnd,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `=?=` / `is`
    Is,
    /// `=!=` / `isnt`
    Isnt,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<<`
    Shl,
    /// `>>`
    Shr,
    /// `>>>`
    UShr,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
}

impl BinOp {
    /// Binding strength: higher binds tighter.
    pub fn precedence(self) -> u8 {
        use BinOp::*;
        match self {
            Or => 1,
            And => 2,
            BitOr => 3,
            BitXor => 4,
            BitAnd => 5,
            Eq | Ne | Is | Isnt => 6,
            Lt | Le | Gt | Ge => 7,
            Shl | Shr | UShr => 8,
            Add | Sub => 9,
            Mul | Div | Mod => 10,
        }
    }

    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        use BinOp::*;
        match self {
            Or => "||",
            And => "&&",
            BitOr => "|",
            BitXor => "^",
            BitAnd => "&",
            Eq => "==",
            Ne => "!=",
            Is => "=?=",
            Isnt => "=!=",
            Lt => "<",
            Le => "<=",
            Gt => ">",
            Ge => ">=",
            Shl => "<<",
            Shr => ">>",
            UShr => ">>>",
            Add => "+",
            Sub => "-",
            Mul => "*",
            Div => "/",
            Mod => "%",
        }
    }
}

/// A function call: the resolved function and its arguments.
#[derive(Clone, Debug)]
pub struct Call {
    /// The function (or [`Func::Unknown`]).
    pub func: Func,
    /// The name as written.
    pub name: Arc<str>,
    /// Arguments.
    pub args: Vec<Expr>,
    /// A regular expression compiled ahead of time when its pattern and options are constant.
    pub regex: Option<Arc<regex::bytes::Regex>>,
    /// Where the call was written.
    pub pos: Pos,
}

/// An expression tree.
#[derive(Clone, Debug)]
pub enum Expr {
    /// A constant.
    Lit(Value),
    /// An attribute reference.
    Attr {
        /// Where to look.
        scope: Scope,
        /// The interned name.
        sym: Sym,
        /// The name as written.
        name: Arc<str>,
    },
    /// `expr.name`
    Select(Box<Expr>, Sym, Arc<str>),
    /// `expr[index]`
    Index(Box<(Expr, Expr)>),
    /// A unary operation.
    Unary(UnOp, Box<Expr>),
    /// A binary operation.
    Binary(BinOp, Box<(Expr, Expr)>),
    /// `c ? a : b`
    Cond(Box<(Expr, Expr, Expr)>),
    /// A function call.
    Call(Box<Call>),
    /// `{ a, b, ... }`
    List(Vec<Expr>),
    /// `[ a = ...; ... ]`
    Ad(ClassAd),
}

/// One attribute of an ad.
#[derive(Clone, Debug)]
pub struct Attribute {
    /// The name as written.
    pub name: Arc<str>,
    /// Its symbol.
    pub sym: Sym,
    /// Its expression.
    pub expr: Expr,
    /// Where the name was written (default for ads built in code).
    pub pos: Pos,
}

#[derive(Clone, Debug)]
struct AdData {
    attrs: Vec<Attribute>,
    /// `(sym, index into attrs)`, sorted by sym.
    index: Vec<(Sym, u32)>,
    /// The symbols of the first SMALL attributes, in `attrs` order, kept
    /// inline so that a look-up in a small ad reads the ad's own allocation
    /// instead of chasing a pointer to the index (matching is memory-bound).
    small: [Sym; SMALL],
}

const SMALL: usize = 24;

impl Default for AdData {
    fn default() -> AdData {
        AdData { attrs: Vec::new(), index: Vec::new(), small: [Sym(u32::MAX); SMALL] }
    }
}

/// A ClassAd: named expressions. Cheap to clone (shared until modified).
#[derive(Clone, Debug, Default)]
pub struct ClassAd(Arc<AdData>);

impl ClassAd {
    /// An empty ad.
    pub fn new() -> ClassAd {
        ClassAd::default()
    }

    /// Sets an attribute (replacing one of the same name, whatever its case).
    pub fn insert(&mut self, name: &str, expr: Expr) {
        self.insert_at(name, expr, Pos::default());
    }

    /// Sets an attribute, remembering where it was written.
    pub fn insert_at(&mut self, name: &str, expr: Expr, pos: Pos) {
        let (sym, name) = Sym::intern(name);
        self.insert_sym(sym, name, expr, pos);
    }

    /// Sets an attribute whose name the caller has interned already (`sym`
    /// must be [`Sym::of`] `name`): builders of many ads, on several threads,
    /// look each name up once instead of once per ad.
    pub fn insert_sym(&mut self, sym: Sym, name: Arc<str>, expr: Expr, pos: Pos) {
        let data = Arc::make_mut(&mut self.0);
        match data.index.binary_search_by_key(&sym, |e| e.0) {
            Ok(i) => {
                let slot = data.index[i].1 as usize;
                data.attrs[slot] = Attribute { name, sym, expr, pos };
            }
            Err(i) => {
                let slot = data.attrs.len();
                data.index.insert(i, (sym, slot as u32));
                if slot < SMALL {
                    data.small[slot] = sym;
                }
                data.attrs.push(Attribute { name, sym, expr, pos });
            }
        }
    }

    /// Looks an attribute up by symbol.
    #[inline]
    pub fn get_sym(&self, sym: Sym) -> Option<&Attribute> {
        let d = &*self.0;
        let n = d.attrs.len();
        if n <= SMALL {
            return d.small[..n].iter().position(|s| *s == sym).map(|i| &d.attrs[i]);
        }
        let idx = &d.index;
        idx.binary_search_by_key(&sym, |e| e.0).ok().map(|i| &d.attrs[idx[i].1 as usize])
    }

    /// Looks an attribute's expression up by name (case-insensitive).
    pub fn lookup(&self, name: &str) -> Option<&Expr> {
        self.get_sym(Sym::of(name)).map(|a| &a.expr)
    }

    /// The attribute record by name.
    pub fn attribute(&self, name: &str) -> Option<&Attribute> {
        self.get_sym(Sym::of(name))
    }

    /// Attributes in the order written.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Expr)> {
        self.0.attrs.iter().map(|a| (&*a.name, &a.expr))
    }

    /// Attribute records in the order written.
    pub fn attributes(&self) -> &[Attribute] {
        &self.0.attrs
    }

    /// Number of attributes.
    pub fn len(&self) -> usize {
        self.0.attrs.len()
    }

    /// True when the ad has no attributes.
    pub fn is_empty(&self) -> bool {
        self.0.attrs.is_empty()
    }

    /// An address that identifies this ad's shared data (for cycle detection).
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }
}

impl fmt::Display for ClassAd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // An empty ad prints as HTCondor prints it: "[  ]".
        f.write_str("[ ")?;
        for (i, a) in self.0.attrs.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write_name(&a.name, f)?;
            write!(f, " = {}", a.expr)?;
        }
        f.write_str(" ]")
    }
}

fn write_name(name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let reserved = ["true", "false", "undefined", "error", "is", "isnt"].iter().any(|k| k.eq_ignore_ascii_case(name));
    let plain = !reserved
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        f.write_str(name)
    } else {
        f.write_str("'")?;
        for c in name.chars() {
            match c {
                '\'' => f.write_str("\\'")?,
                '\\' => f.write_str("\\\\")?,
                c => write!(f, "{c}")?,
            }
        }
        f.write_str("'")
    }
}

impl Expr {
    /// The base of `.name` or `[i]`: numbers are parenthesised so `1.x` does not read as a real.
    fn fmt_base(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Lit(Value::Int(_) | Value::Real(_)) => {
                f.write_str("(")?;
                self.fmt_prec(f, 0)?;
                f.write_str(")")
            }
            e => e.fmt_prec(f, 12),
        }
    }

    fn fmt_prec(&self, f: &mut fmt::Formatter<'_>, min: u8) -> fmt::Result {
        match self {
            Expr::Lit(v) => match v {
                Value::Real(r) => f.write_str(&display_real(*r)),
                Value::Str(s) => {
                    let mut o = String::new();
                    quote_str(s, &mut o);
                    f.write_str(&o)
                }
                v => write!(f, "{v}"),
            },
            Expr::Attr { scope, name, .. } => {
                match scope {
                    Scope::Plain => {}
                    Scope::My => f.write_str("MY.")?,
                    // `{:#}` spells it as gLite JDL does; HTCondor reads both.
                    Scope::Target => f.write_str(if f.alternate() { "other." } else { "TARGET." })?,
                    Scope::Parent => f.write_str("PARENT.")?,
                }
                write_name(name, f)
            }
            Expr::Select(e, _, name) => {
                e.fmt_base(f)?;
                f.write_str(".")?;
                write_name(name, f)
            }
            Expr::Index(b) => {
                b.0.fmt_base(f)?;
                write!(f, "[{}]", b.1)
            }
            Expr::Unary(op, e) => {
                if min > 11 {
                    f.write_str("(")?;
                }
                f.write_str(match op {
                    UnOp::Neg => "-",
                    UnOp::Plus => "+",
                    UnOp::Not => "!",
                    UnOp::BitNot => "~",
                })?;
                e.fmt_prec(f, 11)?;
                if min > 11 {
                    f.write_str(")")?;
                }
                Ok(())
            }
            Expr::Binary(op, b) => {
                let p = op.precedence();
                if p < min {
                    f.write_str("(")?;
                }
                b.0.fmt_prec(f, p)?;
                write!(f, " {} ", op.symbol())?;
                b.1.fmt_prec(f, p + 1)?;
                if p < min {
                    f.write_str(")")?;
                }
                Ok(())
            }
            Expr::Cond(b) => {
                if min > 0 {
                    f.write_str("(")?;
                }
                b.0.fmt_prec(f, 1)?;
                f.write_str(" ? ")?;
                b.1.fmt_prec(f, 0)?;
                f.write_str(" : ")?;
                b.2.fmt_prec(f, 0)?;
                if min > 0 {
                    f.write_str(")")?;
                }
                Ok(())
            }
            Expr::Call(c) => {
                write!(f, "{}(", c.name)?;
                for (i, a) in c.args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str(")")
            }
            Expr::List(l) => {
                f.write_str("{ ")?;
                for (i, a) in l.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str(" }")
            }
            Expr::Ad(ad) => write!(f, "{ad}"),
        }
    }
}

impl fmt::Display for Expr {
    /// ClassAd syntax, parenthesised where precedence needs it. The
    /// alternate form (`{:#}`) writes the other ad's scope as gLite's
    /// `other.` instead of HTCondor's `TARGET.`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_prec(f, 0)
    }
}

/// A ClassAd value. Cheap to clone: strings, lists and ads are reference counted.
#[derive(Clone, Debug)]
pub enum Value {
    /// The value of an attribute that does not exist (or of an operation on one).
    Undefined,
    /// The value of a type error, a division by zero, a failed conversion, ...
    Error,
    /// `true` / `false`.
    Bool(bool),
    /// A 64-bit integer; arithmetic wraps like HTCondor's.
    Int(i64),
    /// A double.
    Real(f64),
    /// A string.
    Str(Arc<str>),
    /// A list of values.
    List(Arc<[Value]>),
    /// A nested ClassAd, together with the scope it was written in (for
    /// references from inside it to enclosing attributes).
    Ad(Arc<ScopeNode>),
}

/// A nested ad as a value: the ad and the scope it was written in.
#[derive(Debug)]
pub struct ScopeNode {
    /// The ad.
    pub ad: ClassAd,
    /// The enclosing ad, where unqualified names not found here are looked up.
    pub parent: Option<Arc<ScopeNode>>,
}

macro_rules! funcs {
    ($($v:ident => $n:literal),* $(,)?) => {
        /// A built-in function, resolved from its (case-insensitive) name at parse time.
        #[derive(Copy, Clone, Debug, PartialEq, Eq)]
        pub enum Func {
            $(
                #[doc = concat!("`", $n, "`")]
                $v,
            )*
            /// A name that is no built-in function: the call evaluates to `error`.
            Unknown,
        }
        impl Func {
            /// Resolves a function name (case-insensitive).
            pub fn from_name(name: &str) -> Func {
                $( if name.eq_ignore_ascii_case($n) { return Func::$v; } )*
                Func::Unknown
            }
            /// Every known function name, as documented.
            pub const NAMES: &'static [&'static str] = &[$($n),*];
        }
    };
}

funcs! {
    Member => "member", IdenticalMember => "identicalMember",
    Regexp => "regexp", RegexpMember => "regexpMember",
    StringListMember => "stringListMember", StringListIMember => "stringListIMember",
    StringListSize => "stringListSize", StringListSum => "stringListSum",
    StringListAvg => "stringListAvg", StringListMin => "stringListMin", StringListMax => "stringListMax",
    IfThenElse => "ifThenElse", IsUndefined => "isUndefined", IsError => "isError",
    IsString => "isString", IsInteger => "isInteger", IsReal => "isReal", IsBoolean => "isBoolean",
    IsList => "isList", IsClassAd => "isClassAd",
    Int => "int", Real => "real", String => "string", Bool => "bool",
    Floor => "floor", Ceiling => "ceiling", Round => "round", Pow => "pow",
    Strcat => "strcat", Substr => "substr", ToUpper => "toUpper", ToLower => "toLower", Size => "size",
    Strcmp => "strcmp", Stricmp => "stricmp",
    Sum => "sum", Avg => "avg", Min => "min", Max => "max",
    AnyCompare => "anyCompare", AllCompare => "allCompare",
    Time => "time",
}

impl Func {
    /// The argument counts a function accepts (inclusive).
    pub fn arity(self) -> (usize, usize) {
        use Func::*;
        match self {
            Time => (0, 0),
            IsUndefined | IsError | IsString | IsInteger | IsReal | IsBoolean | IsList | IsClassAd | Int | Real
            | String | Bool | Floor | Ceiling | Round | ToUpper | ToLower | Size | Sum | Avg | Min | Max => (1, 1),
            Member | IdenticalMember | Pow | Strcmp | Stricmp => (2, 2),
            Regexp | RegexpMember | StringListMember | StringListIMember => (2, 3),
            StringListSize | StringListSum | StringListAvg | StringListMin | StringListMax => (1, 2),
            IfThenElse | AnyCompare | AllCompare => (3, 3),
            Substr => (2, 3),
            Strcat => (0, usize::MAX),
            Unknown => (0, usize::MAX),
        }
    }

    /// True when the result depends only on the arguments (so constant calls fold).
    pub fn is_pure(self) -> bool {
        !matches!(self, Func::Time | Func::Unknown)
    }
}
