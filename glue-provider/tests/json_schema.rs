//! GLUE 2 in JSON: every document the provider prints — each strategy, with
//! and without `[service]` and vGPGPUs, counts from the config, from
//! `scontrol -d show node -o` and from `pbsnodes -x` — validates against the
//! OGF-GLUE/JSON schemas vendored in third-party/ogf-glue-json and cder's
//! GLUE 2.1 accelerator schemas (glue-provider/schema/glue21), read from disk
//! and resolved between themselves only (no network). Documents that break a
//! required property or a type must fail, so the validator is really applied.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{json, Value};

use cder_glue_provider::json::DOCUMENT_SCHEMA_ID;
use cder_glue_provider::site::NodeGroup;
use cder_glue_provider::sources::{CountSource, GroupCounts, SlurmCounts, StaticVirtual, TorqueCounts};
use cder_glue_provider::strategy::Strategy;
use cder_glue_provider::{json, ldif, publish, publish_json, ProviderConfig, ProviderError};

const NOW: u64 = 1_795_291_140;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The schema files of `dir`: (file name, parsed JSON).
fn schema_files(dir: &Path) -> Vec<(String, Value)> {
    let mut files: Vec<(String, Value)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e} (the GLUE JSON schemas are part of the repository)", dir.display()))
        .map(|f| {
            let path = f.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            (path.file_name().unwrap().to_string_lossy().into_owned(), serde_json::from_str(&text).unwrap())
        })
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

/// OGF's ExecutionEnvironment.json types CPUTimeScalingFactor and
/// WallTimeScalingFactor `"float"`, which is no JSON Schema type (draft-04
/// has `"number"`): the one erratum applied, in memory, to the unmodified file.
fn erratum(name: &str, mut schema: Value) -> Value {
    if name == "ExecutionEnvironment.json" {
        let mut fixed = 0;
        for p in ["CPUTimeScalingFactor", "WallTimeScalingFactor"] {
            let ty = &mut schema["properties"][p]["type"];
            assert_eq!(*ty, "float", "{name}: {p}: the vendored schema changed; revisit the erratum");
            *ty = json!("number");
            fixed += 1;
        }
        assert_eq!(fixed, 2);
    }
    schema
}

/// Every schema, by its `id`, after the erratum.
fn all_schemas() -> Vec<(String, Value)> {
    let ogf = schema_files(&repo().join("third-party/ogf-glue-json/schema"));
    let cder = schema_files(&repo().join("glue-provider/schema/glue21"));
    assert_eq!(ogf.len(), 35, "OGF-GLUE/JSON has 35 schema files: {:?}", ogf.iter().map(|f| &f.0).collect::<Vec<_>>());
    assert_eq!(cder.len(), 4, "{:?}", cder.iter().map(|f| &f.0).collect::<Vec<_>>());
    ogf.into_iter()
        .chain(cder)
        .map(|(name, schema)| {
            assert_eq!(schema["$schema"], "http://json-schema.org/draft-04/schema#", "{name}");
            let id = schema["id"].as_str().unwrap_or_else(|| panic!("{name} has no id")).to_string();
            assert!(id.ends_with(&format!("/{name}")), "{name}: id {id}");
            (id, erratum(&name, schema))
        })
        .collect()
}

/// The validator for a cder document: Glue21Accelerator.json, which is
/// OGF's Glue2.json plus the three accelerator arrays.
fn validator() -> &'static jsonschema::Validator {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        let schemas = all_schemas();
        for (id, schema) in &schemas {
            if let Err(e) = jsonschema::draft4::meta::validate(schema) {
                panic!("{id} is not a valid draft-04 schema: {e}");
            }
        }
        let root = schemas.iter().find(|(id, _)| id == DOCUMENT_SCHEMA_ID).expect("the document schema").1.clone();
        let registry = jsonschema::Registry::new()
            .draft(jsonschema::Draft::Draft4)
            .extend(schemas.into_iter().map(|(id, schema)| (id, jsonschema::Resource::from_contents(schema))))
            .unwrap()
            .prepare()
            .unwrap();
        let registry: &'static jsonschema::Registry = Box::leak(Box::new(registry));
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft4)
            .offline()
            .with_registry(registry)
            .build(&root)
            .unwrap_or_else(|e| panic!("building the GLUE JSON validator: {e}"))
    })
}

fn errors(doc: &Value) -> Vec<String> {
    validator().iter_errors(doc).map(|e| format!("{}: {e}", e.instance_path())).collect()
}

pub(crate) fn assert_valid(doc: &Value, what: &str) {
    let errs = errors(doc);
    assert!(errs.is_empty(), "{what}: the JSON does not validate:\n{}\n{doc:#}", errs.join("\n"));
}

const SITE: &str = r#"[site]
computing_service_id = "ce.example.org_ComputingElement"
computing_manager_id = "ce.example.org_ComputingElement_Manager"
ce_unique_id = "ce.example.org:8443/cream-slurm-gpgpu"
cluster_id = "ce.example.org"
computing_share_ids = ["ce.example.org_gpu_atlas", "ce.example.org_gpu_cms"]
SOURCE

[[group]]
id = "ce.example.org_gts450"
name = "GTS 450 nodes"
nodes = ["wn[01-03]"]
platform = "amd64"
main_memory_mib = 16384
virtual_memory_mib = 20480
physical_cpus = 2
logical_cpus = 16
cpu_vendor = "Intel"
cpu_model = "Xeon E5-2650"
cpu_clock_mhz = 2000
os_name = "debian"
os_version = "12"

[[group.device]]
model = "GeForce GTS 450"
count = 2
memory_mib = 1024
compute_capability = "2.1"
multiprocessors = 4
cores_per_mp = 48
clock_mhz = 1660
STATIC
"#;

const SERVICE: &str = r#"
[service]
type = "org.glite.ce.CREAM"
admin_domain = "EXAMPLE-SITE"
manager_product = "SLURM"
manager_version = "23.02"

[[virtual]]
method = "rCUDA"
total = 8
free = 5
"#;

/// A count source fed with what the LRMS printed, through the provider's own parsers.
enum Recorded {
    Slurm(&'static [u8]),
    Torque(&'static [u8]),
}

const SCONTROL: &[u8] = b"NodeName=wn01 Arch=x86_64 Gres=gpu:2 GresUsed=gpu:1(IDX:0) State=MIXED\n\
NodeName=wn02 Gres=gpu:2(S:0) GresUsed=gpu:0(IDX:N/A) State=IDLE+DRAIN Reason=Xid\n\
NodeName=wn03 Gres=gpu:2 GresUsed=gpu:0(IDX:N/A) State=IDLE\n";

const PBSNODES: &[u8] =
    b"<Data><Node><name>wn01</name><state>job-exclusive</state><gpus>2</gpus><jobs>0-7/2.srv</jobs></Node>\
<Node><name>wn02</name><state>free</state><gpus>2</gpus></Node>\
<Node><name>wn03</name><state>down</state><gpus>2</gpus></Node></Data>";

impl CountSource for Recorded {
    fn counts(&self, groups: &[NodeGroup]) -> Result<Vec<GroupCounts>, ProviderError> {
        match self {
            Recorded::Slurm(out) => SlurmCounts {
                scontrol: "scontrol".into(),
                gres: [("gpgpu".to_string(), "gpu".to_string())].into(),
                timeout: Duration::from_secs(1),
            }
            .counts_from_output(groups, out),
            Recorded::Torque(out) => TorqueCounts { pbsnodes: "pbsnodes".into(), timeout: Duration::from_secs(1) }
                .counts_from_output(groups, out),
        }
    }
}

/// (name, config, count source, free GPUs it reports).
fn sites() -> Vec<(&'static str, ProviderConfig, Box<dyn CountSource>, u32)> {
    let config = |source: &str, statics: &str, extra: &str| {
        let text = format!("{}{extra}", SITE.replace("SOURCE", source).replace("STATIC", statics));
        ProviderConfig::parse(&text, Path::new("glue-provider.toml")).unwrap()
    };
    let statics = || {
        let c = config("\n[counts]\nsource = \"static\"\n", "used = 2\noffline = 1", "");
        let counts = cder_glue_provider::sources::from_config(&c);
        (c, counts)
    };
    let (plain, plain_counts) = statics();
    let with_service = config("\n[counts]\nsource = \"static\"\n", "used = 2\noffline = 1", SERVICE);
    let service_counts = cder_glue_provider::sources::from_config(&with_service);
    vec![
        ("static", plain, plain_counts, 3),
        ("static+service", with_service, service_counts, 3),
        (
            "slurm+service",
            config("\n[counts]\nsource = \"slurm\"\n", "", SERVICE),
            Box::new(Recorded::Slurm(SCONTROL)),
            3,
        ),
        (
            "torque+service",
            config("\n[counts]\nsource = \"torque\"\n", "", SERVICE),
            Box::new(Recorded::Torque(PBSNODES)),
            2,
        ),
    ]
}

const GLUE2_STRATEGIES: [&[Strategy]; 6] = [
    &[Strategy::AttributeExtension],
    &[Strategy::ClassExtension],
    &[Strategy::Hybrid],
    &[Strategy::Glue21Accelerator],
    &[Strategy::AttributeExtension, Strategy::TaggedEnvironment],
    &[
        Strategy::AttributeExtension,
        Strategy::ClassExtension,
        Strategy::Hybrid,
        Strategy::Glue21Accelerator,
        Strategy::TaggedEnvironment,
    ],
];

fn document(config: &ProviderConfig, counts: &dyn CountSource, strategies: &[Strategy]) -> (Value, Vec<ldif::Entry>) {
    let vgpus = StaticVirtual::from_config(&config.virtual_environments);
    let text = publish_json(config, counts, &vgpus, strategies, NOW).unwrap();
    assert!(text.ends_with("}\n"), "{text}");
    let ldif = ldif::parse(&publish(config, counts, &vgpus, strategies, NOW).unwrap()).unwrap();
    (serde_json::from_str(&text).unwrap(), ldif)
}

fn entities<'a>(doc: &'a Value, kind: &str) -> &'a [Value] {
    doc.get(kind).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

fn ee_free(doc: &Value) -> Option<String> {
    let ee = &entities(doc, "ExecutionEnvironment")[0];
    let from_info = ee["OtherInfo"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|v| v.as_str().and_then(|s| s.strip_prefix("GPGPUFreeInstances=")).map(str::to_string));
    from_info.or_else(|| ee["Extension"]["GPGPUFreeInstances"].as_str().map(str::to_string))
}

#[test]
fn every_strategy_and_count_source_validates() {
    let mut checked = 0;
    for (site, config, counts, free) in sites() {
        for strategies in GLUE2_STRATEGIES {
            let what = format!("{site} {strategies:?}");
            let (doc, ldif) = document(&config, counts.as_ref(), strategies);
            assert_valid(&doc, &what);
            checked += 1;

            // The same model as the LDIF: every GLUE 2 entry is one JSON entity, every Extension one key.
            let glue2 = |e: &&ldif::Entry| e.values("objectClass").any(|c| c.starts_with("GLUE2"));
            let is_ext = |e: &&ldif::Entry| e.values("objectClass").any(|c| c == "GLUE2Extension");
            let ldif_entities = ldif.iter().filter(glue2).filter(|e| !is_ext(e)).count();
            let ldif_extensions = ldif.iter().filter(glue2).filter(is_ext).count();
            let all: Vec<&Value> = doc.as_object().unwrap().values().flat_map(|v| v.as_array().unwrap()).collect();
            assert_eq!(all.len(), ldif_entities, "{what}");
            let keys: usize = all.iter().filter_map(|e| e["Extension"].as_object()).map(|x| x.len()).sum();
            assert_eq!(keys, ldif_extensions, "{what}");

            let ee = &entities(&doc, "ExecutionEnvironment")[0];
            assert_eq!(ee["ID"], "ce.example.org_gts450", "{what}");
            assert_eq!(ee["TotalInstances"], 3, "{what}");
            assert_eq!(ee["LogicalCPUs"], 16, "{what}");
            assert_eq!(ee["ConnectivityOut"], true, "{what}");
            assert_eq!(ee["CreationTime"], "2026-11-21T19:59:00Z", "{what}");
            assert_eq!(ee["Associations"]["ManagerID"], "ce.example.org_ComputingElement_Manager", "{what}");
            if strategies != [Strategy::Glue21Accelerator] {
                assert_eq!(ee_free(&doc), Some(free.to_string()), "{what}");
            }
            if strategies.contains(&Strategy::Glue21Accelerator) {
                let acc = &entities(&doc, "AcceleratorEnvironment")[0];
                assert_eq!(acc["Type"], "GPU", "{what}");
                assert_eq!(
                    (&acc["PhysicalAccelerators"], &acc["LogicalAccelerators"]),
                    (&json!(2), &json!(2)),
                    "{what}"
                );
                assert_eq!(acc["Memory"], 1024, "{what}");
                assert_eq!(acc["ComputeCapability"], json!(["2.1"]), "{what}");
                assert_eq!(acc["Associations"]["ExecutionEnvironmentID"], json!(["ce.example.org_gts450"]), "{what}");
                let shares = entities(&doc, "ComputingShareAcceleratorInfo");
                assert_eq!(shares.len(), 2, "{what}");
                assert_eq!(shares[1]["Associations"]["ComputingShareID"], "ce.example.org_gpu_cms", "{what}");
                assert_eq!(shares[0]["FreeAcceleratorSlots"], free, "{what}");
                let manager = &entities(&doc, "ComputingManagerAcceleratorInfo")[0];
                assert_eq!(manager["TotalPhysicalAccelerators"], 6, "{what}");
                assert_eq!(manager["Associations"]["ComputingManagerID"], "ce.example.org_ComputingElement_Manager");
            }
            if site.contains("service") {
                let service = &entities(&doc, "ComputingService")[0];
                assert_eq!(service["Type"], "org.glite.ce.CREAM", "{what}");
                assert_eq!(service["Associations"]["AdminDomainID"], "EXAMPLE-SITE", "{what}");
                let manager = &entities(&doc, "ComputingManager")[0];
                assert_eq!(manager["ProductVersion"], "23.02", "{what}");
                assert_eq!(manager["Associations"]["ServiceID"], "ce.example.org_ComputingElement", "{what}");
                assert_eq!(manager["Associations"]["ResourceID"], json!(["ce.example.org_gts450"]), "{what}");
                let rcuda = &entities(&doc, "ApplicationEnvironment")[0];
                assert_eq!(rcuda["AppName"], "rCUDA", "{what}");
                assert_eq!(rcuda["Associations"]["ExecutionEnvironmentID"], json!(["ce.example.org_gts450"]), "{what}");
            }
        }
    }
    assert_eq!(checked, 24);
}

/// AMD and Intel groups and a group of NVIDIA and AMD types under one prefix
/// (issue 46): every GLUE 2 document validates; the architecture is the
/// AcceleratorEnvironment's ComputeCapability where CUDA has none.
#[test]
fn amd_intel_and_mixed_vendor_documents_validate() {
    let text = SITE
        .replace("SOURCE", "\n[counts]\nsource = \"static\"\n")
        .replace("STATIC", "")
        .replace(
            "model = \"GeForce GTS 450\"\ncount = 2\nmemory_mib = 1024\ncompute_capability = \"2.1\"\nmultiprocessors = 4\ncores_per_mp = 48\nclock_mhz = 1660\n",
            "model = \"NVIDIA A100-SXM4-40GB\"\ncount = 2\nmemory_mib = 40960\ncompute_capability = \"8.0\"\n\n\
             [[group.device]]\ntype = \"amdgpu\"\nprefix = \"GPGPU\"\nvendor = \"amd\"\nmodel = \"AMD Instinct MI210\"\ncount = 2\nmemory_mib = 65536\narchitecture = \"gfx90a\"\n\n\
             [[group]]\nid = \"ce.example.org_max1550\"\nnodes = [\"xe01\"]\nplatform = \"amd64\"\nmain_memory_mib = 262144\nvirtual_memory_mib = 262144\n\
             physical_cpus = 2\nlogical_cpus = 112\nos_name = \"debian\"\nos_version = \"12\"\n\n\
             [[group.device]]\nmodel = \"Intel Data Center GPU Max 1550\"\nvendor = \"intel\"\ncount = 4\nmemory_mib = 131072\narchitecture = \"Xe-HPC\"\n",
        );
    assert!(text.contains("MI210"), "the SITE fixture's device moved");
    let config = ProviderConfig::parse(&format!("{text}{SERVICE}"), Path::new("glue-provider.toml")).unwrap();
    let counts = cder_glue_provider::sources::from_config(&config);
    for strategies in GLUE2_STRATEGIES {
        let what = format!("AMD, Intel, mixed {strategies:?}");
        let (doc, _) = document(&config, counts.as_ref(), strategies);
        assert_valid(&doc, &what);
        let ids: Vec<&str> = entities(&doc, "ExecutionEnvironment").iter().map(|e| e["ID"].as_str().unwrap()).collect();
        assert_eq!(ids, ["ce.example.org_gts450_gpgpu", "ce.example.org_gts450_amdgpu", "ce.example.org_max1550"]);
        if strategies.contains(&Strategy::Glue21Accelerator) {
            let acc: Vec<(&Value, &Value)> = entities(&doc, "AcceleratorEnvironment")
                .iter()
                .map(|a| (&a["Vendor"], &a["ComputeCapability"]))
                .collect();
            let expected = [
                (json!("Nvidia"), json!(["8.0"])),
                (json!("AMD"), json!(["gfx90a"])),
                (json!("Intel"), json!(["Xe-HPC"])),
            ];
            assert_eq!(acc, expected.iter().map(|(a, b)| (a, b)).collect::<Vec<_>>(), "{what}");
        }
    }
}

#[test]
fn glue13_alone_is_refused_with_exit_2() {
    let (_, config, counts, _) = sites().remove(0);
    let e = publish_json(&config, counts.as_ref(), &StaticVirtual::default(), &[Strategy::TaggedEnvironment], NOW)
        .unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("no JSON rendering"), "{e}");
}

/// Shares, endpoints and policies as CE providers publish them (and as the
/// per-VO shares do): what the JSON makes of them validates too.
#[test]
fn computing_shares_endpoints_and_policies_validate() {
    let svc = "GLUE2ServiceID=ce.example.org_ComputingElement,GLUE2GroupID=resource,o=glue";
    let text = format!(
        "dn: {svc}\nobjectClass: GLUE2Service\nobjectClass: GLUE2ComputingService\nGLUE2ServiceID: ce.example.org_ComputingElement\n\
GLUE2ServiceType: org.glite.ce.CREAM\nGLUE2ServiceQualityLevel: production\nGLUE2ServiceCapability: executionmanagement.jobexecution\n\
GLUE2ServiceAdminDomainForeignKey: EXAMPLE-SITE\nGLUE2ComputingServiceRunningJobs: 3\n\n\
dn: GLUE2EndpointID=ce.example.org_org.glite.ce.CREAM,{svc}\nobjectClass: GLUE2Endpoint\nobjectClass: GLUE2ComputingEndpoint\n\
GLUE2EndpointID: ce.example.org_org.glite.ce.CREAM\nGLUE2EndpointURL: https://ce.example.org:8443/ce-cream/services\n\
GLUE2EndpointInterfaceName: org.glite.ce.CREAM\nGLUE2EndpointQualityLevel: production\nGLUE2EndpointHealthState: ok\n\
GLUE2EndpointServingState: production\nGLUE2EndpointServiceForeignKey: ce.example.org_ComputingElement\n\
GLUE2ComputingEndpointStaging: staginginout\nGLUE2ComputingEndpointComputingServiceForeignKey: ce.example.org_ComputingElement\n\n\
dn: GLUE2PolicyID=ce.example.org_policy,GLUE2EndpointID=ce.example.org_org.glite.ce.CREAM,{svc}\nobjectClass: GLUE2Policy\n\
objectClass: GLUE2AccessPolicy\nGLUE2PolicyID: ce.example.org_policy\nGLUE2PolicyScheme: org.glite.standard\nGLUE2PolicyRule: VO:atlas\n\
GLUE2PolicyRule: VO:cms\nGLUE2PolicyUserDomainForeignKey: atlas\nGLUE2PolicyUserDomainForeignKey: cms\n\
GLUE2AccessPolicyEndpointForeignKey: ce.example.org_org.glite.ce.CREAM\n\n\
dn: GLUE2ShareID=gpu_atlas,{svc}\nobjectClass: GLUE2Share\nobjectClass: GLUE2ComputingShare\nGLUE2ShareID: gpu_atlas\n\
GLUE2ComputingShareMappingQueue: gpu\nGLUE2ComputingShareServingState: production\nGLUE2ComputingShareFreeSlots: 12\n\
GLUE2ComputingShareMaxSlotsPerJob: 4\nGLUE2ComputingSharePreemption: undefined\nGLUE2EntityOtherInfo: GPGPUFreeInstances=3\n\
GLUE2ShareServiceForeignKey: ce.example.org_ComputingElement\nGLUE2ComputingShareComputingServiceForeignKey: ce.example.org_ComputingElement\n\
GLUE2ShareEndpointForeignKey: ce.example.org_org.glite.ce.CREAM\nGLUE2ComputingShareComputingEndpointForeignKey: ce.example.org_org.glite.ce.CREAM\n\
GLUE2ShareResourceForeignKey: ce.example.org_gts450\nGLUE2ComputingShareExecutionEnvironmentForeignKey: ce.example.org_gts450\n\n\
dn: GLUE2PolicyID=gpu_atlas_policy,GLUE2ShareID=gpu_atlas,{svc}\nobjectClass: GLUE2Policy\nobjectClass: GLUE2MappingPolicy\n\
GLUE2PolicyID: gpu_atlas_policy\nGLUE2PolicyScheme: org.glite.standard\nGLUE2PolicyRule: VO:atlas\n\
GLUE2MappingPolicyShareForeignKey: gpu_atlas\n\n\
dn: GLUE2ExtensionLocalID=GPGPUUsedInstances,GLUE2ShareID=gpu_atlas,{svc}\nobjectClass: GLUE2Extension\n\
GLUE2ExtensionLocalID: GPGPUUsedInstances\nGLUE2ExtensionKey: GPGPUUsedInstances\nGLUE2ExtensionValue: 1\n\
GLUE2ExtensionEntityForeignKey: gpu_atlas\n\n"
    );
    let entries = ldif::parse(&text).unwrap();
    let doc = json::render(&entries).unwrap();
    assert_valid(&doc, "CE entries");
    let share = &doc["ComputingShare"][0];
    assert_eq!(share["FreeSlots"], 12);
    assert_eq!(share["Preemption"], Value::Null);
    assert_eq!(share["Extension"], json!({"GPGPUUsedInstances": "1"}));
    assert_eq!(
        share["Associations"],
        json!({"ServiceID": "ce.example.org_ComputingElement", "EndpointID": ["ce.example.org_org.glite.ce.CREAM"], "ResourceID": ["ce.example.org_gts450"]})
    );
    let endpoint = &doc["ComputingEndpoint"][0];
    assert_eq!(endpoint["Associations"]["ShareID"], json!(["gpu_atlas"]), "from the share's EndpointID");
    assert_eq!(doc["AccessPolicy"][0]["Associations"]["UserDomainID"], json!(["atlas", "cms"]));
    let mapping = &doc["MappingPolicy"][0];
    assert_eq!(mapping["Rule"], json!(["VO:atlas"]));
    assert_eq!(
        mapping["Associations"],
        json!({"ShareID": "gpu_atlas", "UserDomainID": ["atlas"]}),
        "UserDomain from the VO rule"
    );
    assert_eq!(doc["ComputingService"][0]["RunningJobs"], 3);
}

/// What a case changes, how, and the property its error must name.
type Breakage = (&'static str, fn(&mut Value), &'static str);

/// A valid document, changed one way each: each change must be reported,
/// at the place it was made.
#[test]
fn broken_documents_fail_validation() {
    let (_, config, counts, _) = sites().remove(1);
    let (good, _) = document(&config, counts.as_ref(), &[Strategy::AttributeExtension, Strategy::Glue21Accelerator]);
    assert_valid(&good, "before breaking it");
    let cases: Vec<Breakage> = vec![
        (
            "EE without Platform",
            |d| _ = d["ExecutionEnvironment"][0].as_object_mut().unwrap().remove("Platform"),
            "Platform",
        ),
        (
            "EE TotalInstances a string",
            |d| d["ExecutionEnvironment"][0]["TotalInstances"] = json!("3"),
            "TotalInstances",
        ),
        ("EE without its ManagerID", |d| d["ExecutionEnvironment"][0]["Associations"] = json!({}), "ManagerID"),
        (
            "OtherInfo a string",
            |d| d["ExecutionEnvironment"][0]["OtherInfo"] = json!("GPGPUFreeInstances=3"),
            "OtherInfo",
        ),
        (
            "Manager without resources",
            |d| d["ComputingManager"][0]["Associations"]["ResourceID"] = json!([]),
            "ResourceID",
        ),
        (
            "Service without QualityLevel",
            |d| _ = d["ComputingService"][0].as_object_mut().unwrap().remove("QualityLevel"),
            "QualityLevel",
        ),
        (
            "QualityLevel outside its enumeration",
            |d| d["ComputingService"][0]["QualityLevel"] = json!("great"),
            "QualityLevel",
        ),
        ("Validity a string", |d| d["ComputingService"][0]["Validity"] = json!("600"), "Validity"),
        (
            "AcceleratorEnvironment without LogicalAccelerators",
            |d| _ = d["AcceleratorEnvironment"][0].as_object_mut().unwrap().remove("LogicalAccelerators"),
            "LogicalAccelerators",
        ),
        ("AcceleratorEnvironment Memory negative", |d| d["AcceleratorEnvironment"][0]["Memory"] = json!(-1), "Memory"),
        (
            "ShareAcceleratorInfo without its share",
            |d| d["ComputingShareAcceleratorInfo"][0]["Associations"] = json!({}),
            "ComputingShareID",
        ),
        (
            "ManagerAcceleratorInfo slots a float",
            |d| d["ComputingManagerAcceleratorInfo"][0]["TotalAcceleratorSlots"] = json!(1.5),
            "TotalAcceleratorSlots",
        ),
    ];
    let mut seen = BTreeMap::new();
    for (what, breaks, needle) in cases {
        let mut doc = good.clone();
        breaks(&mut doc);
        let errs = errors(&doc);
        assert!(!errs.is_empty(), "{what}: still valid");
        assert!(errs.iter().any(|e| e.contains(needle)), "{what}: no error names {needle}: {errs:?}");
        seen.insert(what, errs.len());
    }
    assert_eq!(seen.len(), 12);
}

/// The erratum is needed: the unmodified ExecutionEnvironment.json is not a
/// valid draft-04 schema, and the validator refuses to build from it.
#[test]
fn vendored_float_type_needs_the_erratum() {
    let path = repo().join("third-party/ogf-glue-json/schema/ExecutionEnvironment.json");
    let raw: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(!jsonschema::draft4::meta::is_valid(&raw));
    assert!(jsonschema::draft4::meta::is_valid(&erratum("ExecutionEnvironment.json", raw.clone())));
    assert!(jsonschema::options().with_draft(jsonschema::Draft::Draft4).offline().build(&raw).is_err());
}

/// The binary: `--format json` prints one document that validates; bad
/// combinations are usage errors.
#[test]
fn cli_prints_valid_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("glue-provider.toml");
    let text = format!(
        "{}{SERVICE}",
        SITE.replace("SOURCE", "\n[counts]\nsource = \"static\"\n").replace("STATIC", "used = 1")
    );
    std::fs::write(&path, text).unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_cder-glue-provider"))
            .arg("--config")
            .arg(&path)
            .args(args)
            .env_remove("CDER_GLUE_CONFIG")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&["--format", "json", "--strategy", "hybrid,glue21-accelerator,tagged-environment"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid(&doc, "cder-glue-provider --format json");
    assert_eq!(doc["ExecutionEnvironment"][0]["Extension"]["GPGPUFreeInstances"], "5");
    assert_eq!(entities(&doc, "AcceleratorEnvironment").len(), 1);

    let out = run(&["--format", "json", "--arc-plugin"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--arc-plugin prints LDIF"));
    let out = run(&["--format", "yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["--format", "json", "--strategy", "tagged-environment"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

/// Per-VO ComputingShares (`[[vo]]`) and their MappingPolicies, rendered by
/// every GLUE 2 strategy, validate too; each share keeps its own figures.
#[test]
fn per_vo_shares_validate_with_every_strategy() {
    use cder_glue_provider::shares::{share_id, ShareDevices, SharePolicy, VoShare};
    let (_, config, counts, _) = sites().remove(1);
    let groups = cder_glue_provider::site::node_groups(&config).unwrap();
    let group_counts = counts.counts(&groups).unwrap();
    let service = config.site.computing_service_id.get_ref().clone();
    let share = |vo: &str, free: u32| VoShare {
        id: share_id("gpu", vo, &service),
        queue: "gpu".into(),
        vo: vo.into(),
        serving_state: "production",
        environments: groups.iter().map(|g| g.id().to_string()).collect(),
        devices: [("GPGPU".to_string(), ShareDevices { total: 4, free, used: 4 - free, max_per_job: 2 })].into(),
        // The limits and load EGI's profile asks for: numbers in the JSON too.
        policy: SharePolicy {
            max_wall_time: Some(172_800),
            default_wall_time: Some(7200),
            max_cpu_time: None,
            default_cpu_time: None,
            max_slots_per_job: 32,
            max_main_memory_mib: 65_536,
            guaranteed_main_memory_mib: 16_384,
            max_virtual_memory_mib: 81_920,
            guaranteed_virtual_memory_mib: 20_480,
            max_running_jobs: Some(10),
            max_total_jobs: Some(100),
            running_jobs: 2,
            waiting_jobs: 1,
            free_slots: 0,
            used_slots: 8,
            estimated_average_waiting_time: 1800,
            estimated_worst_waiting_time: 3600,
        },
    };
    let snapshot = cder_glue_provider::sources::Snapshot {
        groups: groups.clone().into_iter().zip(group_counts).collect(),
        virtual_environments: Vec::new(),
        shares: vec![share("atlas", 1), share("cms", 3)],
        created: NOW,
    };
    for strategies in GLUE2_STRATEGIES {
        let entries = cder_glue_provider::strategy::render(&config, &snapshot, strategies).unwrap();
        let doc = json::render(&entries).unwrap();
        assert_valid(&doc, &format!("per-VO shares, {strategies:?}"));
        let shares = entities(&doc, "ComputingShare");
        assert_eq!(shares.len(), 2, "{strategies:?}");
        assert_eq!(shares[0]["DefaultWallTime"], 7200, "{strategies:?}: {}", shares[0]);
        assert_eq!(shares[0]["DefaultCPUTime"], 999_999_999, "{strategies:?}: unlimited is GLUE's 999999999");
        let policies = entities(&doc, "MappingPolicy");
        let rules: Vec<&Value> = policies.iter().map(|p| &p["Rule"]).collect();
        assert_eq!(rules, [&json!(["VO:atlas"]), &json!(["VO:cms"])], "{strategies:?}");
        assert_eq!(policies[1]["Associations"]["ShareID"], json!(share_id("gpu", "cms", &service)));
    }
}
