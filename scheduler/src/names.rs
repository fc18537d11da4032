//! [`named_enum!`]: an enum whose variants each have one name — in JSON, in the database,
//! in the console and in error messages — with `as_str`, `Display`, `FromStr` (whose
//! error names what was expected) and `ALL`, written once for every such enum.

/// Defines a string-backed enum: `what` names it in errors ("`x` is not a valid route;
/// expected one of: …"); each variant may carry doc comments and `#[default]`.
macro_rules! named_enum {
    (
        what = $what:literal;
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $( $(#[$vmeta])* $variant ),+ }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: [$name; [$(stringify!($variant)),+].len()] = [$($name::$variant),+];

            /// Its one name (JSON, database, console).
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!(
                        "`{other}` is not a valid {}; expected one of: {}",
                        $what,
                        [$($text),+].join(", ")
                    )),
                }
            }
        }
    };
}

pub(crate) use named_enum;

/// The start of a value for an error message: at most 40 characters, `…` if cut.
pub fn excerpt(value: &str) -> String {
    let mut chars = value.chars();
    let head: String = chars.by_ref().take(40).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}
