//! `when:` conditions: CEL compiled once at load, evaluated per call.
//!
//! Variables: `args` (the call's arguments), `principal` (`{id, groups, claims}`), `tool` (the tool
//! name, prompt name or resource URI), `annotations` (the pinned tool's annotations object,
//! empty if none), plus `upstream` and `method` as strings.

use std::collections::HashMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cel::objects::{Key, Map};
use cel::{Context, Env, Program, Value as Cel};
use countersign_jsonrpc::{Kind, RawJson};
use serde_json::Value;

use crate::model::Principal;

/// One compiled `when:` expression.
#[derive(Clone)]
pub(crate) struct Condition {
    source: String,
    program: Arc<Program>,
}

impl fmt::Debug for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Condition").field(&self.source).finish()
    }
}

/// The standard CEL environment, built once per policy: building it per call would cost
/// more than most evaluations.
#[derive(Clone)]
pub(crate) struct CelEnv(Arc<Env>);

impl fmt::Debug for CelEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CelEnv(stdlib)")
    }
}

impl Default for CelEnv {
    fn default() -> Self {
        CelEnv(Arc::new(Env::stdlib()))
    }
}

/// The facts a condition can see, converted to CEL lazily: only calls that reach a rule
/// with a `when:` pay for the conversion.
pub(crate) struct Facts<'a> {
    pub(crate) args: &'a RawJson,
    pub(crate) principal: &'a Principal,
    pub(crate) tool: &'a str,
    pub(crate) annotations: Option<&'a Value>,
    pub(crate) upstream: &'a str,
    pub(crate) method: &'a str,
}

/// Facts already bound into a CEL context, reused across the rules of one call.
pub(crate) struct Bound {
    context: Context<'static, 'static>,
    /// Why the arguments could not be bound; every condition then fails (closed).
    args_refused: Option<String>,
}

/// Most argument values a condition may see. CEL holds a copy of every value it is given, at
/// tens of bytes each; beyond this a call's conditions are not evaluated and the decision is
/// taken fail-closed, so a client cannot buy memory with a body of tiny values.
pub const MAX_CONDITION_VALUES: usize = 10_000;

impl Facts<'_> {
    pub(crate) fn bind(&self, env: &CelEnv) -> Bound {
        let mut context = Context::with_env(Arc::clone(&env.0));
        let mut args_refused = None;
        let args = if self.args.is_null() {
            // An absent or null `arguments` is an empty call, not an error.
            Cel::Map(Map {
                map: Arc::new(HashMap::new()),
            })
        } else {
            let mut budget = MAX_CONDITION_VALUES;
            raw_to_cel(self.args, &mut budget).unwrap_or_else(|| {
                args_refused = Some(format!(
                    "the arguments hold more than {MAX_CONDITION_VALUES} values"
                ));
                Cel::Null
            })
        };
        context.add_variable_from_value("args", args);
        let mut principal = HashMap::<Key, Cel>::new();
        principal.insert("id".into(), Cel::from(self.principal.id.as_str()));
        principal.insert(
            "groups".into(),
            Cel::List(Arc::new(
                self.principal
                    .groups
                    .iter()
                    .map(|g| Cel::from(g.as_str()))
                    .collect(),
            )),
        );
        principal.insert(
            "claims".into(),
            // From a verified token, so its size is the issuer's, not the client's.
            Cel::Map(Map {
                map: Arc::new(
                    self.principal
                        .claims
                        .iter()
                        .map(|(k, v)| (Key::from(k.as_str()), to_cel(v)))
                        .collect(),
                ),
            }),
        );
        context.add_variable_from_value(
            "principal",
            Cel::Map(Map {
                map: Arc::new(principal),
            }),
        );
        context.add_variable_from_value("tool", Cel::from(self.tool));
        let annotations = match self.annotations {
            Some(v @ Value::Object(_)) => to_cel(v),
            _ => Cel::Map(Map {
                map: Arc::new(HashMap::new()),
            }),
        };
        context.add_variable_from_value("annotations", annotations);
        context.add_variable_from_value("upstream", Cel::from(self.upstream));
        context.add_variable_from_value("method", Cel::from(self.method));
        Bound {
            context,
            args_refused,
        }
    }
}

impl Condition {
    pub(crate) fn compile(env: &CelEnv, source: &str) -> Result<Condition, String> {
        let program = env.0.compile(source).map_err(|e| {
            // CEL's message is multi-line (error, source line, caret); one line reads
            // better in logs and the caret is meaningless once joined.
            e.to_string()
                .lines()
                .next()
                .unwrap_or("syntax error")
                .trim_start_matches("ERROR: ")
                .replace("<input>:", "at ")
        })?;
        Ok(Condition {
            source: source.to_owned(),
            program: Arc::new(program),
        })
    }

    /// `Ok(true/false)` when the expression evaluated to a bool; `Err(why)` otherwise
    /// (missing key, type mismatch, non-bool result, interpreter panic). The caller turns
    /// an error into the fail-closed outcome.
    pub(crate) fn evaluate(&self, bound: &Bound) -> Result<bool, String> {
        if let Some(why) = &bound.args_refused {
            return Err(why.clone());
        }
        // The interpreter walks attacker-controlled arguments; a bug in it must cost one
        // call (decided fail-closed), never the gateway's worker.
        let result = catch_unwind(AssertUnwindSafe(|| self.program.execute(&bound.context)))
            .map_err(|_| "the CEL interpreter panicked".to_owned())?;
        match result {
            Ok(Cel::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("evaluated to {}, not a bool", other.type_of())),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// The CEL value of client arguments, spending one unit of `budget` per value; `None` once
/// it runs out.
fn raw_to_cel(value: &RawJson, budget: &mut usize) -> Option<Cel> {
    *budget = budget.checked_sub(1)?;
    Some(match value.kind() {
        Kind::Null => Cel::Null,
        Kind::Bool => Cel::Bool(value.as_bool() == Some(true)),
        Kind::Number => number_to_cel(value.as_text()),
        Kind::String => Cel::from(value.as_str().unwrap_or_default().as_ref()),
        Kind::Array => {
            let mut items = Vec::new();
            for item in value.items()? {
                items.push(raw_to_cel(&item, budget)?);
            }
            Cel::List(Arc::new(items))
        }
        Kind::Object => {
            let mut map = HashMap::new();
            for (key, item) in value.members()? {
                map.insert(Key::from(key.as_ref()), raw_to_cel(&item, budget)?);
            }
            Cel::Map(Map { map: Arc::new(map) })
        }
    })
}

fn number_to_cel(text: &str) -> Cel {
    if let Ok(i) = text.parse::<i64>() {
        Cel::Int(i)
    } else if let Ok(u) = text.parse::<u64>() {
        Cel::UInt(u)
    } else {
        // Exact text parsed by Rust: overflow becomes ±inf, which still compares the way an
        // author writing `> limit` expects.
        Cel::Float(text.parse::<f64>().unwrap_or(f64::NAN))
    }
}

fn to_cel(value: &Value) -> Cel {
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Cel::Int(i)
            } else if let Some(u) = n.as_u64() {
                Cel::UInt(u)
            } else {
                // Exact text (arbitrary_precision) parsed by Rust: overflow becomes ±inf,
                // which still compares the way an author writing `> limit` expects.
                Cel::Float(n.to_string().parse::<f64>().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => Cel::from(s.as_str()),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => Cel::Map(Map {
            map: Arc::new(
                map.iter()
                    .map(|(k, v)| (Key::from(k.as_str()), to_cel(v)))
                    .collect(),
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(source: &str, args: impl Into<RawJson>) -> Result<bool, String> {
        let args = args.into();
        let env = CelEnv::default();
        let condition = Condition::compile(&env, source).expect("compiles");
        let principal = Principal {
            id: "ada".into(),
            groups: vec!["interns".into()],
            claims: Arc::new(
                json!({"tenant": "acme", "scope": "read write"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
        };
        let annotations = json!({"readOnlyHint": false});
        let facts = Facts {
            args: &args,
            principal: &principal,
            tool: "create_order",
            annotations: Some(&annotations),
            upstream: "store",
            method: "tools/call",
        };
        condition.evaluate(&facts.bind(&env))
    }

    #[test]
    fn conditions_see_args_principal_tool_annotations_upstream_method() {
        assert_eq!(
            eval("args.items.size() > 1", json!({"items": [1, 2]})),
            Ok(true)
        );
        assert_eq!(
            eval("principal.groups.exists(g, g == 'interns')", json!({})),
            Ok(true)
        );
        assert_eq!(
            eval("principal.id == 'ada' && tool == 'create_order'", json!({})),
            Ok(true)
        );
        assert_eq!(
            eval("principal.claims.tenant == 'acme'", json!({})),
            Ok(true)
        );
        assert_eq!(eval("annotations.readOnlyHint", json!({})), Ok(false));
        assert_eq!(
            eval("upstream == 'store' && method == 'tools/call'", json!({})),
            Ok(true)
        );
        assert_eq!(eval("has(args.x)", Value::Null), Ok(false));
    }

    #[test]
    fn numbers_keep_their_kind() {
        assert_eq!(
            eval(
                "args.n == 7 && args.f > 7.4 && args.u > 0",
                json!({"n": 7, "f": 7.5, "u": 18446744073709551615u64})
            ),
            Ok(true)
        );
        let huge: Value =
            serde_json::from_str(r#"{"n": 1e400}"#).expect("arbitrary precision keeps it");
        assert_eq!(eval("args.n > 1000000.0", huge), Ok(true));
    }

    #[test]
    fn raw_arguments_bind_as_the_values_they_denote() {
        let args = RawJson::parse_slice(
            br#"{ "s" : "\u0041da" , "n" : 1.50 , "e" : 1E2 , "l" : [ ] , "o" : { "k" : null } }"#,
        )
        .expect("json");
        assert_eq!(
            eval(
                "args.s == 'Ada' && args.n == 1.5 && args.e == 100.0 && args.l.size() == 0 \
                 && args.o.k == null",
                args
            ),
            Ok(true)
        );
    }

    #[test]
    fn arguments_with_too_many_values_fail_closed() {
        // The object, the array and its items: exactly the limit.
        let at_limit = json!({"items": vec![0; MAX_CONDITION_VALUES - 2]});
        assert_eq!(eval("args.items.size() > 0", at_limit), Ok(true));
        let over = json!({"items": vec![0; MAX_CONDITION_VALUES - 1]});
        let err = eval("true", over).expect_err("one value too many");
        assert!(err.contains("more than"), "{err}");
    }

    #[test]
    fn missing_keys_and_non_bool_results_are_errors() {
        assert!(
            eval("args.missing > 1", json!({}))
                .unwrap_err()
                .contains("missing")
        );
        assert!(
            eval("args.n + 1", json!({"n": 1}))
                .unwrap_err()
                .contains("not a bool")
        );
        assert!(eval("args.s > 1", json!({"s": "x"})).is_err());
    }

    #[test]
    fn syntax_errors_are_one_line() {
        let err =
            Condition::compile(&CelEnv::default(), "args.items.size() >").expect_err("invalid");
        assert!(!err.contains('\n'), "{err}");
        assert!(err.contains("Syntax error"), "{err}");
    }
}
