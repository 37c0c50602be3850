//! GLUE 2 in JSON: the OGF GLUE working group's JSON rendering (GFD.219,
//! repository OGF-GLUE/JSON), which ARC 7's REST information, IPF and the
//! newer EGI services read.
//!
//! The document is rendered from the same entries as the LDIF
//! ([`crate::strategy::render`]), so whatever the strategies publish there
//! appears here too. The rendering is the one GFD.219 defines:
//!
//! * one top-level array per entity type (`"ExecutionEnvironment": [ … ]`),
//!   keyed by the most specific type of the entry's objectClasses;
//! * attribute names without the `GLUE2<Class>` prefix (`GLUE2ExecutionEnvironmentPlatform`
//!   → `Platform`, `GLUE2ResourceID` → `ID`);
//! * values typed as the schema types the property (integer, float, boolean
//!   — `undefined` is `null` —, array for multi-valued ones, else string);
//! * foreign keys as `Associations`, named `<Entity>ID` as the schemas name
//!   them (both of LDAP's `GLUE2ManagerServiceForeignKey` and
//!   `GLUE2ComputingManagerComputingServiceForeignKey` are `ServiceID`);
//! * `GLUE2Extension` children folded into their entity's `Extension`
//!   object (`{"GPGPUFreeInstances": "30"}`), OtherInfo as an array.
//!
//! Associations the schemas require but LDAP expresses from the other end
//! only are filled from the document: a Manager's `ResourceID` from the
//! Resources naming it, an Endpoint's `ShareID` from the Shares naming it,
//! an ApplicationEnvironment's `ExecutionEnvironmentID` from the
//! ExecutionEnvironments of its ComputingManager, a Policy's `UserDomainID`
//! from its `VO:<name>` rules; a Service's `ContactID` and `ServiceID` are
//! empty and its `LocationID` null when nothing names them (as IPF does).
//!
//! Property types come from the schemas themselves, embedded here: the
//! vendored OGF ones (third-party/ogf-glue-json) and cder's for GLUE 2.1's
//! accelerator entities (glue-provider/schema/glue21), which OGF has not
//! rendered in JSON. GLUE 1.3 entries (`o=grid`) have no JSON rendering and
//! are left out.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::{Map, Number, Value};

use crate::error::ProviderError;
use crate::ldif::Entry;

macro_rules! schemas {
    ($dir:literal: $($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!($dir, $name, ".json")))),*]
    };
}

/// The OGF-GLUE/JSON schemas, vendored unmodified: (entity name, file text).
pub const OGF_SCHEMAS: &[(&str, &str)] = schemas!("../../third-party/ogf-glue-json/schema/":
    "AccessPolicy", "Activity", "AdminDomain", "ApplicationEnvironment", "ApplicationHandle",
    "Benchmark", "ComputingActivity", "ComputingEndpoint", "ComputingManager", "ComputingService",
    "ComputingShare", "Contact", "DataStore", "Domain", "Endpoint", "Entity", "ExecutionEnvironment",
    "Glue2", "Location", "Manager", "MappingPolicy", "Policy", "Resource", "Service", "Share",
    "StorageAccessProtocol", "StorageEndpoint", "StorageManager", "StorageService",
    "StorageServiceCapacity", "StorageShare", "StorageShareCapacity", "ToComputingService",
    "ToStorageService", "UserDomain",
);

/// cder's schemas for the GLUE 2.1 draft's accelerator entities, in the
/// same style, and the document schema that adds them to Glue2.json.
pub const GLUE21_SCHEMAS: &[(&str, &str)] = schemas!("../schema/glue21/":
    "AcceleratorEnvironment", "ComputingManagerAcceleratorInfo", "ComputingShareAcceleratorInfo",
    "Glue21Accelerator",
);

/// The `id` of the document schema a cder JSON document validates against.
pub const DOCUMENT_SCHEMA_ID: &str = "http://cder.invalid/glue/2.1-draft-0.5/Glue21Accelerator.json";

/// How a schema types a property.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    String,
    Integer,
    Float,
    /// `true` / `false`; `nullable` for GLUE's ExtendedBoolean_t (`undefined`).
    Boolean {
        nullable: bool,
    },
    Array,
}

/// One entity's schema: its parent (`allOf`), its properties and associations.
#[derive(Debug, Default)]
struct EntitySchema {
    parent: Option<String>,
    properties: BTreeMap<String, Kind>,
    /// Association name → true when it holds an array of IDs.
    associations: BTreeMap<String, bool>,
}

fn kind_of(property: &Value) -> Kind {
    let types: Vec<&str> = match &property["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let nullable = types.contains(&"null");
    match types.iter().find(|t| **t != "null").copied().unwrap_or("string") {
        "integer" => Kind::Integer,
        // OGF's ExecutionEnvironment.json types the scaling factors "float", which JSON Schema calls "number".
        "number" | "float" => Kind::Float,
        "boolean" => Kind::Boolean { nullable },
        "array" => Kind::Array,
        _ => Kind::String,
    }
}

fn parse_schema(text: &str) -> EntitySchema {
    let v: Value = serde_json::from_str(text).expect("the embedded GLUE JSON schemas are JSON (checked by the tests)");
    let parent = v["allOf"][0]["$ref"]
        .as_str()
        .and_then(|r| r.rsplit('/').next())
        .and_then(|f| f.strip_suffix(".json"))
        .map(str::to_string);
    let mut schema = EntitySchema { parent, ..EntitySchema::default() };
    for (name, p) in v["properties"].as_object().into_iter().flatten() {
        if name == "Associations" {
            for (a, ap) in p["properties"].as_object().into_iter().flatten() {
                schema.associations.insert(a.clone(), kind_of(ap) == Kind::Array);
            }
        } else {
            schema.properties.insert(name.clone(), kind_of(p));
        }
    }
    schema
}

fn schemas() -> &'static BTreeMap<String, EntitySchema> {
    static SCHEMAS: OnceLock<BTreeMap<String, EntitySchema>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        OGF_SCHEMAS
            .iter()
            .chain(GLUE21_SCHEMAS)
            .filter(|(name, _)| !matches!(*name, "Glue2" | "Glue21Accelerator"))
            .map(|(name, text)| (name.to_string(), parse_schema(text)))
            .collect()
    })
}

/// `name` and its ancestors, most specific first (`ExecutionEnvironment`, `Resource`, `Entity`).
fn chain(name: &str) -> Vec<&'static str> {
    let all = schemas();
    let mut out = Vec::new();
    let mut next = all.get_key_value(name);
    while let Some((n, s)) = next {
        out.push(n.as_str());
        next = s.parent.as_deref().and_then(|p| all.get_key_value(p));
    }
    out
}

/// The GLUE 2.0 base of a computing specialisation, as associations name it.
fn base_entity(name: &str) -> Option<&'static str> {
    Some(match name {
        "ComputingService" => "Service",
        "ComputingManager" => "Manager",
        "ComputingEndpoint" => "Endpoint",
        "ComputingShare" => "Share",
        "ComputingActivity" => "Activity",
        "ExecutionEnvironment" => "Resource",
        _ => return None,
    })
}

/// One entity being rendered.
struct Rendered {
    kind: &'static str,
    dn: String,
    object: Map<String, Value>,
    associations: Map<String, Value>,
}

impl Rendered {
    fn id(&self) -> Option<&str> {
        self.object.get("ID").and_then(Value::as_str)
    }

    fn ids(&self, association: &str) -> Vec<&str> {
        match self.associations.get(association) {
            Some(Value::String(s)) => vec![s.as_str()],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        }
    }

    fn is_a(&self, ancestor: &str) -> bool {
        chain(self.kind).contains(&ancestor)
    }
}

/// The GLUE 2 entity type of an entry: its most specific objectClass with a schema.
fn entity_kind(entry: &Entry) -> Option<&'static str> {
    entry
        .values("objectClass")
        .filter_map(|c| c.strip_prefix("GLUE2"))
        .filter_map(|c| schemas().get_key_value(c).map(|(n, _)| n.as_str()))
        .max_by_key(|n| chain(n).len())
}

fn bad(entry: &Entry, message: String) -> ProviderError {
    ProviderError::Input(format!("GLUE 2 JSON: entry {:?}: {message}", entry.dn))
}

fn typed(entry: &Entry, property: &str, kind: Kind, values: Vec<String>) -> Result<Value, ProviderError> {
    if kind == Kind::Array {
        return Ok(Value::Array(values.into_iter().map(Value::String).collect()));
    }
    let [value] = <[String; 1]>::try_from(values)
        .map_err(|v| bad(entry, format!("{property} has {} values, the schema allows one", v.len())))?;
    let wrong =
        |what: &str| bad(entry, format!("{property} = {value:?} is not {what}, as the GLUE 2 JSON schema types it"));
    Ok(match kind {
        Kind::String | Kind::Array => Value::String(value.clone()),
        Kind::Integer => value
            .parse::<i64>()
            .map(Number::from)
            .or_else(|_| value.parse::<u64>().map(Number::from))
            .map(Value::Number)
            .map_err(|_| wrong("an integer"))?,
        Kind::Float => value
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| wrong("a finite number"))?,
        Kind::Boolean { nullable } => match value.to_ascii_lowercase().as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "undefined" if nullable => Value::Null,
            _ => return Err(wrong(if nullable { "true, false or undefined" } else { "true or false" })),
        },
    })
}

/// Renders one GLUE 2 entry; `None` for an entry with no JSON rendering (GLUE 1.3).
fn render_entry(entry: &Entry) -> Result<Option<Rendered>, ProviderError> {
    let Some(kind) = entity_kind(entry) else {
        if entry.values("objectClass").any(|c| c.starts_with("GLUE2")) {
            let classes: Vec<&str> = entry.values("objectClass").collect();
            return Err(bad(entry, format!("no GLUE 2 JSON schema for objectClass {classes:?}")));
        }
        return Ok(None);
    };
    let lineage = chain(kind);
    let all = schemas();
    // Values per JSON name, in first-seen order, before typing.
    let mut properties: Vec<(String, Kind, Vec<String>)> = Vec::new();
    let mut associations: Vec<(String, Option<bool>, Vec<String>)> = Vec::new();
    for (attribute, value) in &entry.attributes {
        if attribute.eq_ignore_ascii_case("objectClass") {
            continue;
        }
        let name = attribute
            .strip_prefix("GLUE2")
            .and_then(|rest| lineage.iter().find_map(|class| rest.strip_prefix(class)).filter(|n| !n.is_empty()))
            .ok_or_else(|| bad(entry, format!("attribute {attribute} is not a {kind} attribute")))?;
        if let Some(target) = name.strip_suffix("ForeignKey") {
            // The association as the schemas of the entity's lineage name it.
            let candidates = [Some(target), base_entity(target)];
            let known = candidates.iter().flatten().find_map(|t| {
                let id = format!("{t}ID");
                lineage.iter().find_map(|c| all[*c].associations.get(&id).map(|array| (id.clone(), Some(*array))))
            });
            let (id, array) = known.unwrap_or_else(|| (format!("{target}ID"), None));
            match associations.iter_mut().find(|(n, _, _)| *n == id) {
                Some((_, _, values)) if values.contains(value) => {}
                Some((_, _, values)) => values.push(value.clone()),
                None => associations.push((id, array, vec![value.clone()])),
            }
        } else {
            let json_kind = if name == "ID" {
                Kind::String
            } else {
                lineage.iter().find_map(|c| all[*c].properties.get(name).copied()).unwrap_or(Kind::String)
            };
            match properties.iter_mut().find(|(n, _, _)| n == name) {
                Some((_, _, values)) => values.push(value.clone()),
                None => properties.push((name.to_string(), json_kind, vec![value.clone()])),
            }
        }
    }
    let mut object = Map::new();
    for (name, json_kind, values) in properties {
        // A property no schema names (a newer GLUE attribute) keeps LDAP's strings.
        let json_kind = if json_kind == Kind::String && values.len() > 1 { Kind::Array } else { json_kind };
        let value = typed(entry, &name, json_kind, values)?;
        object.insert(name, value);
    }
    let mut rendered = Map::new();
    for (name, array, values) in associations {
        let array = array.unwrap_or(values.len() > 1);
        let kind = if array { Kind::Array } else { Kind::String };
        let value = typed(entry, &format!("Associations.{name}"), kind, values)?;
        rendered.insert(name, value);
    }
    Ok(Some(Rendered { kind, dn: entry.dn.clone(), object, associations: rendered }))
}

/// The DN of an entry's parent: the DN without its first RDN.
fn parent_dn(dn: &str) -> &str {
    let mut escaped = false;
    for (i, c) in dn.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            ',' if !escaped => return &dn[i + 1..],
            _ => escaped = false,
        }
    }
    ""
}

/// Folds a `GLUE2Extension` entry into the `Extension` object of its
/// entity: the entry it sits under, else the one its EntityForeignKey names.
fn attach_extension(entry: &Entry, entities: &mut [Rendered]) -> Result<(), ProviderError> {
    let one = |name: &str| {
        entry
            .values(name)
            .next()
            .map(str::to_string)
            .ok_or_else(|| bad(entry, format!("GLUE2Extension without {name}")))
    };
    let (key, value) = (one("GLUE2ExtensionKey")?, one("GLUE2ExtensionValue")?);
    let foreign_key = entry.values("GLUE2ExtensionEntityForeignKey").next();
    let parent = parent_dn(&entry.dn);
    let at = entities
        .iter()
        .position(|e| e.dn.eq_ignore_ascii_case(parent))
        .or_else(|| foreign_key.and_then(|id| entities.iter().position(|e| e.id() == Some(id))))
        .ok_or_else(|| bad(entry, "its entity is not in the document".into()))?;
    let extension = entities[at].object.entry("Extension").or_insert_with(|| Value::Object(Map::new()));
    let map = extension.as_object_mut().expect("Extension is only ever an object");
    match map.get(&key) {
        Some(Value::String(old)) if *old != value => {
            Err(bad(entry, format!("two Extensions with key {key:?} and different values ({old:?}, {value:?})")))
        }
        _ => {
            map.insert(key, Value::String(value));
            Ok(())
        }
    }
}

/// The VOs a Policy's rules grant (`VO:atlas`, `VOMS:/atlas/Role=production`), its UserDomains.
fn rule_user_domains(rules: Option<&Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for rule in rules.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        let vo = if let Some(vo) = rule.strip_prefix("VO:") {
            Some(vo)
        } else {
            rule.strip_prefix("VOMS:").and_then(|fqan| fqan.trim_start_matches('/').split('/').next())
        };
        if let Some(vo) = vo.map(str::trim).filter(|v| !v.is_empty()) {
            if !out.iter().any(|o| o == vo) {
                out.push(Value::String(vo.to_string()));
            }
        }
    }
    out
}

/// Adds the associations the schemas require that LDAP holds at the other end only.
fn complete_associations(entities: &mut [Rendered]) {
    let resource_managers: Vec<(String, Vec<String>)> = entities
        .iter()
        .filter(|e| e.is_a("Resource"))
        .filter_map(|e| Some((e.id()?.to_string(), e.ids("ManagerID").into_iter().map(str::to_string).collect())))
        .collect();
    let share_endpoints: Vec<(String, Vec<String>)> = entities
        .iter()
        .filter(|e| e.is_a("Share"))
        .filter_map(|e| Some((e.id()?.to_string(), e.ids("EndpointID").into_iter().map(str::to_string).collect())))
        .collect();
    let naming = |pairs: &[(String, Vec<String>)], id: &str| -> Value {
        Value::Array(
            pairs
                .iter()
                .filter(|(_, to)| to.iter().any(|t| t == id))
                .map(|(from, _)| Value::String(from.clone()))
                .collect(),
        )
    };
    for e in entities.iter_mut() {
        let id = e.id().unwrap_or_default().to_string();
        let missing = |e: &Rendered, name: &str| !e.associations.contains_key(name);
        if e.is_a("Manager") && missing(e, "ResourceID") {
            e.associations.insert("ResourceID".into(), naming(&resource_managers, &id));
        }
        if e.is_a("Endpoint") && missing(e, "ShareID") {
            e.associations.insert("ShareID".into(), naming(&share_endpoints, &id));
        }
        if e.kind == "ApplicationEnvironment" && missing(e, "ExecutionEnvironmentID") {
            let managers: Vec<String> = e.ids("ComputingManagerID").into_iter().map(str::to_string).collect();
            let environments = resource_managers
                .iter()
                .filter(|(_, m)| m.iter().any(|m| managers.contains(m)))
                .map(|(ee, _)| Value::String(ee.clone()))
                .collect();
            e.associations.insert("ExecutionEnvironmentID".into(), Value::Array(environments));
        }
        if e.is_a("Policy") && missing(e, "UserDomainID") {
            let domains = rule_user_domains(e.object.get("Rule"));
            if !domains.is_empty() {
                e.associations.insert("UserDomainID".into(), Value::Array(domains));
            }
        }
        if e.is_a("Service") {
            for (name, empty) in [
                ("ContactID", Value::Array(Vec::new())),
                ("LocationID", Value::Null),
                ("ServiceID", Value::Array(Vec::new())),
            ] {
                e.associations.entry(name).or_insert(empty);
            }
        }
    }
}

/// The GLUE 2 JSON document of `entries` (as [`crate::strategy::render`] makes them).
pub fn render(entries: &[Entry]) -> Result<Value, ProviderError> {
    let mut entities = Vec::new();
    let mut extensions = Vec::new();
    for entry in entries {
        if entry.values("objectClass").any(|c| c.eq_ignore_ascii_case("GLUE2Extension")) {
            extensions.push(entry);
        } else if let Some(e) = render_entry(entry)? {
            entities.push(e);
        }
    }
    if entities.is_empty() {
        return Err(ProviderError::Input(
            "GLUE 2 JSON: the strategies publish no GLUE 2 entity (tagged-environment is GLUE 1.3, which has no JSON rendering)".into(),
        ));
    }
    for x in extensions {
        attach_extension(x, &mut entities)?;
    }
    complete_associations(&mut entities);
    let mut document = Map::new();
    for mut e in entities {
        if !e.associations.is_empty() {
            e.object.insert("Associations".into(), Value::Object(e.associations));
        }
        let list = document.entry(e.kind).or_insert_with(|| Value::Array(Vec::new()));
        list.as_array_mut().expect("each type's list is an array").push(Value::Object(e.object));
    }
    Ok(Value::Object(document))
}

/// [`render`] as the provider prints it: indented JSON and a final newline.
pub fn write(entries: &[Entry]) -> Result<String, ProviderError> {
    let mut text = serde_json::to_string_pretty(&render(entries)?).expect("a serde_json Value always serialises");
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schema_file_is_embedded() {
        for (dir, embedded) in [("../third-party/ogf-glue-json/schema", OGF_SCHEMAS), ("schema/glue21", GLUE21_SCHEMAS)]
        {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
            let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .map(|f| f.unwrap().file_name().to_string_lossy().trim_end_matches(".json").to_string())
                .collect();
            on_disk.sort();
            let names: Vec<&str> = embedded.iter().map(|(n, _)| *n).collect();
            assert_eq!(on_disk, names, "{}", dir.display());
        }
    }

    #[test]
    fn lineage_and_kinds_come_from_the_schemas() {
        assert_eq!(chain("ComputingManager"), ["ComputingManager", "Manager", "Entity"]);
        assert_eq!(chain("AcceleratorEnvironment"), ["AcceleratorEnvironment", "Entity"]);
        let ee = &schemas()["ExecutionEnvironment"];
        assert_eq!(ee.properties["TotalInstances"], Kind::Integer);
        assert_eq!(ee.properties["CPUTimeScalingFactor"], Kind::Float);
        assert_eq!(ee.properties["ConnectivityIn"], Kind::Boolean { nullable: true });
        assert_eq!(schemas()["Entity"].properties["OtherInfo"], Kind::Array);
        assert!(schemas()["Share"].associations["ResourceID"], "an array of IDs");
        assert!(!schemas()["Share"].associations["ServiceID"], "one ID");
    }

    #[test]
    fn parent_dn_skips_escaped_commas() {
        assert_eq!(parent_dn("a=1,b=2,o=glue"), "b=2,o=glue");
        assert_eq!(parent_dn("a=x\\,y,o=glue"), "o=glue");
        assert_eq!(parent_dn("o=glue"), "");
    }

    #[test]
    fn values_are_typed_and_bad_ones_named() {
        let mut e = Entry::new("GLUE2ResourceID=ee,o=glue");
        e.push("objectClass", "GLUE2Resource").push("objectClass", "GLUE2ExecutionEnvironment");
        e.push("GLUE2ResourceID", "ee").push("GLUE2ResourceManagerForeignKey", "m");
        e.push("GLUE2ExecutionEnvironmentComputingManagerForeignKey", "m");
        e.push("GLUE2ExecutionEnvironmentTotalInstances", "16");
        e.push("GLUE2ExecutionEnvironmentCPUTimeScalingFactor", "1.25");
        e.push("GLUE2ExecutionEnvironmentConnectivityIn", "undefined");
        e.push("GLUE2ExecutionEnvironmentConnectivityOut", "TRUE");
        e.push("GLUE2EntityOtherInfo", "GPGPUPerNode=2");
        let doc = render(std::slice::from_ref(&e)).unwrap();
        let ee = &doc["ExecutionEnvironment"][0];
        assert_eq!(ee["TotalInstances"], 16);
        assert_eq!(ee["CPUTimeScalingFactor"], 1.25);
        assert_eq!(ee["ConnectivityIn"], Value::Null);
        assert_eq!(ee["ConnectivityOut"], true);
        assert_eq!(ee["OtherInfo"], serde_json::json!(["GPGPUPerNode=2"]));
        assert_eq!(ee["Associations"], serde_json::json!({"ManagerID": "m"}));
        e.push("GLUE2ExecutionEnvironmentMainMemorySize", "lots");
        let err = render(&[e]).unwrap_err().to_string();
        assert!(
            err.contains("MainMemorySize = \"lots\" is not an integer") && err.contains("GLUE2ResourceID=ee"),
            "{err}"
        );
    }

    #[test]
    fn glue13_alone_has_no_json_rendering() {
        let mut s = Entry::new("GlueSubClusterUniqueID=x,mds-vo-name=resource,o=grid");
        s.push("objectClass", "GlueSubCluster");
        let err = render(&[s]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("tagged-environment"), "{err}");
    }

    #[test]
    fn policy_user_domains_from_vo_rules() {
        let rules = serde_json::json!(["VO:atlas", "VOMS:/cms/Role=production", "VO:atlas", "banned:x"]);
        assert_eq!(rule_user_domains(Some(&rules)), [Value::from("atlas"), Value::from("cms")]);
    }
}
