//! The six tools: their definitions for `tools/list` and what `tools/call` does with them.
//!
//! The annotations deliberately cover every classification the gateway knows: two read-only
//! tools, one additive write, two destructive tools, and one with no annotations at all (which
//! the spec's defaults make destructive).

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::mcp::MethodError;
use crate::store::{DemoStore, OrderItem, StoreError};

type Object = Map<String, Value>;
/// A tool body: arguments in, a `CallToolResult` out, or the text of a tool error.
type ToolFn = fn(&DemoStore, Value) -> Result<Object, String>;

/// The `tools` array of a `tools/list` result (one page: there are only six).
pub(crate) fn definitions() -> Value {
    let order_id = json!({"type": "string", "description": "Order id, e.g. ord-1001"});
    let sku = json!({"type": "string", "description": "Product SKU, e.g. TOY-001"});
    json!([
        {
            "name": "list_products",
            "title": "List products",
            "description": "List the catalog: SKU, name, price in cents and units in stock.",
            "inputSchema": object_schema(json!({}), &[]),
            "annotations": {"readOnlyHint": true, "openWorldHint": false},
        },
        {
            "name": "get_order",
            "title": "Get order",
            "description": "Look up one order by id.",
            "inputSchema": object_schema(json!({"order_id": order_id}), &["order_id"]),
            "outputSchema": order_schema(),
            "annotations": {"readOnlyHint": true, "openWorldHint": false},
        },
        {
            "name": "create_order",
            "title": "Create order",
            "description": "Place an order; takes the items out of stock. Returns the new order.",
            "inputSchema": object_schema(json!({
                "customer": {"type": "string", "minLength": 1, "maxLength": 100},
                "items": {
                    "type": "array", "minItems": 1, "maxItems": 20,
                    "items": object_schema(json!({
                        "sku": sku,
                        "quantity": {"type": "integer", "minimum": 1, "maximum": 1000},
                    }), &["sku", "quantity"]),
                },
            }), &["customer", "items"]),
            "annotations": {"readOnlyHint": false, "destructiveHint": false,
                            "idempotentHint": false, "openWorldHint": false},
        },
        {
            "name": "adjust_stock",
            "title": "Adjust stock",
            "description": "Add (positive delta) or remove (negative delta) units of one product.",
            "inputSchema": object_schema(json!({
                "sku": sku,
                "delta": {"type": "integer", "description": "Units to add; negative removes"},
            }), &["sku", "delta"]),
            "annotations": {"readOnlyHint": false, "destructiveHint": true,
                            "idempotentHint": false, "openWorldHint": false},
        },
        {
            "name": "cancel_order",
            "title": "Cancel order",
            "description": "Cancel a placed order and return its items to stock.",
            "inputSchema": object_schema(json!({"order_id": order_id}), &["order_id"]),
            "annotations": {"readOnlyHint": false, "destructiveHint": true,
                            "idempotentHint": true, "openWorldHint": false},
        },
        {
            // No `annotations` on purpose: shows that an unannotated tool counts as destructive.
            "name": "restock_all",
            "title": "Restock everything",
            "description": "Set every product's stock to 100, overwriting the current counts.",
            "inputSchema": object_schema(json!({}), &[]),
        },
    ])
}

fn object_schema(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// `get_order`'s outputSchema; `Order` serializes to exactly this shape.
fn order_schema() -> Value {
    let line = object_schema(
        json!({
            "sku": {"type": "string"},
            "quantity": {"type": "integer", "minimum": 1},
            "unit_price_cents": {"type": "integer", "minimum": 0},
        }),
        &["sku", "quantity", "unit_price_cents"],
    );
    object_schema(
        json!({
            "id": {"type": "string"},
            "customer": {"type": "string"},
            "lines": {"type": "array", "items": line},
            "total_cents": {"type": "integer", "minimum": 0},
            "status": {"type": "string", "enum": ["placed", "cancelled"]},
        }),
        &["id", "customer", "lines", "total_cents", "status"],
    )
}

/// Runs `tools/call`. Only a missing name or an unknown tool is a protocol error; everything
/// the tool itself rejects is an `isError` result the model can read and correct.
pub(crate) fn call(store: &DemoStore, params: &Object) -> Result<Object, MethodError> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| MethodError::InvalidParams("tools/call needs a string `name`".into()))?;
    let run = tool_fn(name)
        .ok_or_else(|| MethodError::InvalidParams(format!("unknown tool `{name}`")))?;
    let arguments = params.get("arguments").cloned().unwrap_or(json!({}));
    tracing::debug!(tool = %name, "tools/call");
    Ok(run(store, arguments).unwrap_or_else(|text| {
        tracing::debug!(tool = %name, "tool refused the call");
        let mut result = text_result(format!("{name} failed: {text}"));
        result.insert("isError".into(), Value::Bool(true));
        result
    }))
}

fn tool_fn(name: &str) -> Option<ToolFn> {
    Some(match name {
        "list_products" => list_products,
        "get_order" => get_order,
        "create_order" => create_order,
        "adjust_stock" => adjust_stock,
        "cancel_order" => cancel_order,
        "restock_all" => restock_all,
        _ => return None,
    })
}

/// Store refusals become the text of a tool error.
impl From<StoreError> for String {
    fn from(error: StoreError) -> Self {
        error.to_string()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OrderIdArgs {
    order_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateOrderArgs {
    customer: String,
    items: Vec<OrderItem>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AdjustStockArgs {
    sku: String,
    delta: i64,
}

fn list_products(store: &DemoStore, args: Value) -> Result<Object, String> {
    parse::<NoArgs>(args)?;
    Ok(json_result(&json!({"products": store.list_products()})))
}

fn get_order(store: &DemoStore, args: Value) -> Result<Object, String> {
    let args: OrderIdArgs = parse(args)?;
    let order = store.get_order(&args.order_id)?;
    let order = to_value(&order);
    let mut result = json_result(&order);
    // The tool declares an outputSchema, so the structured form is mandatory.
    result.insert("structuredContent".into(), order);
    Ok(result)
}

fn create_order(store: &DemoStore, args: Value) -> Result<Object, String> {
    let args: CreateOrderArgs = parse(args)?;
    let order = store.create_order(&args.customer, &args.items)?;
    Ok(json_result(&to_value(&order)))
}

fn adjust_stock(store: &DemoStore, args: Value) -> Result<Object, String> {
    let args: AdjustStockArgs = parse(args)?;
    let product = store.adjust_stock(&args.sku, args.delta)?;
    Ok(json_result(&to_value(&product)))
}

fn cancel_order(store: &DemoStore, args: Value) -> Result<Object, String> {
    let args: OrderIdArgs = parse(args)?;
    let order = store.cancel_order(&args.order_id)?;
    Ok(json_result(&to_value(&order)))
}

fn restock_all(store: &DemoStore, args: Value) -> Result<Object, String> {
    parse::<NoArgs>(args)?;
    let products = store.restock_all();
    Ok(json_result(&json!({"products": products})))
}

/// Deserializes arguments strictly: unknown, missing or mistyped fields are refused with serde's
/// message, which names the field — enough for a model to fix its call.
fn parse<T: DeserializeOwned>(args: Value) -> Result<T, String> {
    if !args.is_object() {
        return Err("arguments must be a JSON object".into());
    }
    serde_json::from_value(args).map_err(|e| format!("invalid arguments: {e}"))
}

fn to_value(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).expect("store types serialize to JSON without fail")
}

/// A result whose single text block is the JSON, so clients without structured output see it too.
fn json_result(value: &Value) -> Object {
    text_result(value.to_string())
}

fn text_result(text: String) -> Object {
    let mut result = Map::new();
    result.insert("content".into(), json!([{"type": "text", "text": text}]));
    result
}
