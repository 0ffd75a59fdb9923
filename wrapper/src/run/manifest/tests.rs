//! Tests of run/manifest.rs (parsing runs.toml).

use super::*;

fn p(text: &str) -> Result<Vec<RunSpec>, ManifestError> {
    parse(text, "runs.toml", Path::new("."))
}

#[test]
fn contract_example_parses() {
    let runs = p(r#"
[defaults]
workdir = "."
metric = 'img/s=(?P<value>[0-9.]+)'
[[run]]
name = "lr0.1"
command = ["python", "train.py", "--lr", "0.1"]
env = { SEED = "1" }
[[sweep]]
name = "bs{bs}-lr{lr}"
command = ["python", "train.py", "--bs", "{bs}", "--lr", "{lr}"]
grid = { bs = ["64", "128"], lr = ["0.1", "0.01"] }
"#)
    .unwrap();
    let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "lr0.1",
            "bs64-lr0.1",
            "bs64-lr0.01",
            "bs128-lr0.1",
            "bs128-lr0.01"
        ]
    );
    assert_eq!(runs[0].env, [("SEED".to_string(), "1".to_string())]);
    assert_eq!(runs[3].command[3], "128");
    assert!(runs[4].scanner.throughput.is_custom());
    assert_eq!(runs[4].grid.as_ref().unwrap()["bs"], "128");
    assert!(runs[0].grid.is_none());
}

#[test]
fn numbers_in_grids_and_default_sweep_names() {
    let runs =
        p("[[sweep]]\ncommand = ['t', '{bs}']\ngrid = { bs = [64, 128], lr = [0.1] }\n").unwrap();
    assert_eq!(runs[0].name, "bs=64-lr=0.1");
    assert_eq!(runs[1].command, ["t", "128"]);
}

#[test]
fn errors_name_the_line() {
    let e = p("[[run]]\ncommand = ['a']\nnmae = 'x'\n").unwrap_err();
    assert_eq!(e.line, Some(3), "{e}");
    assert!(e.msg.contains("unknown field `nmae`"), "{e}");

    let e = p("[[run]]\ncommand = []\n").unwrap_err();
    assert_eq!(e.line, Some(2));
    assert!(e.msg.contains("empty command"));

    let e = p("[[run]]\ncommand = ['a']\nmetric = '([0-9'\n").unwrap_err();
    assert_eq!(e.line, Some(3));
    assert!(e.msg.contains("metric: bad regex"), "{e}");

    let e =
        p("[[sweep]]\nname = 'x{lr}-{bs}'\ncommand = ['a']\ngrid = { lr = ['1'] }\n").unwrap_err();
    assert_eq!(e.line, Some(2));
    assert!(e.msg.contains("unknown placeholder {bs}"), "{e}");

    let e = p("[[run]]\nname = 'a'\ncommand = ['a']\n[[run]]\nname = 'a'\ncommand = ['b']\n")
        .unwrap_err();
    assert_eq!(e.line, Some(5));
    assert!(e.msg.contains("duplicate run name \"a\""), "{e}");
    assert_eq!(
        e.to_string(),
        "runs.toml:5: duplicate run name \"a\": run names must be unique"
    );
}

#[test]
fn templates() {
    let g: BTreeMap<String, Vec<String>> = [("a".to_string(), vec!["1".to_string()])].into();
    assert!(check_template("x{{y}}{a}", &g).is_ok());
    assert!(check_template("x{", &g).is_err());
    assert!(check_template("x}", &g).is_err());
    assert!(check_template("{a-b}", &g).is_err());
    let vals: BTreeMap<&str, &str> = [("a", "7")].into();
    assert_eq!(fill("{{{a}}}", &vals), "{7}");
}

#[test]
fn units_and_user_metrics() {
    let runs = p(r#"
[defaults]
metric = 'tput (?P<value>[0-9.]+)'
unit = 'seq/s'
metrics = { loss = 'loss=(?P<value>[0-9.]+)' }
[[run]]
name = 'a'
command = ['x']
metrics = { acc = { regex = 'acc=([0-9.]+)' }, loss = { regex = 'L=([0-9.]+)', best = 'max' } }
[[run]]
name = 'b'
command = ['x']
"#)
    .unwrap();
    let a = &runs[0].scanner;
    match &a.throughput {
        Throughput::Custom { unit, .. } => assert_eq!(unit, "seq/s"),
        t => panic!("{t:?}"),
    }
    let names: Vec<(&str, Best)> = a
        .metrics
        .iter()
        .map(|m| (m.name.as_str(), m.best))
        .collect();
    assert_eq!(names, [("acc", Best::Max), ("loss", Best::Max)]);
    assert_eq!(runs[1].scanner.metrics.len(), 1);
    assert_eq!(runs[1].scanner.metrics[0].best, Best::Min);
    let e = p("[[run]]\ncommand = ['x']\nunit = 'img/s'\n").unwrap_err();
    assert!(e.msg.contains("unit without a metric regex"), "{e}");
    let e = p("[[run]]\ncommand = ['x']\nmetrics = { 'a-b' = 'x=(\\d+)' }\n").unwrap_err();
    assert!(e.msg.contains("metric name \"a-b\""), "{e}");
    let e =
        p("[[run]]\ncommand = ['x']\nmetrics = { acc = { regex = 'x=(\\d+)', best = 'up' } }\n")
            .unwrap_err();
    assert!(e.msg.contains("valid: \"min\" or \"max\""), "{e}");
}

#[test]
fn manifests_are_read_through_a_bounded_reader() {
    let e = load(Path::new("/dev/zero")).unwrap_err();
    assert!(
        e.msg.contains("a character device, not a regular file"),
        "{e}"
    );
    let t = tempfile::tempdir().unwrap();
    let big = t.path().join("runs.toml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(MAX_MANIFEST_BYTES + 1).unwrap();
    let e = load(&big).unwrap_err();
    assert!(e.msg.contains("larger than 16 MiB"), "{e}");
}

#[test]
fn bad_names_and_shell_commands() {
    assert!(p("[[run]]\nname = 'a/b'\ncommand = ['x']\n").is_err());
    let r = p("[[run]]\ncommand = 'echo hi'\n").unwrap();
    assert_eq!(r[0].command, ["sh", "-c", "echo hi"]);
    assert_eq!(r[0].name, "run1");
    assert!(p("").unwrap_err().msg.contains("no runs"));
}

#[test]
fn retries_layer_run_over_sweep_over_defaults() {
    let runs = p(r#"
[defaults]
retries = 1
retry_on = "any"
[[run]]
name = "plain"
command = ["x"]
[[run]]
name = "own"
command = ["x"]
retries = 0
retry_on = "oom"
[[sweep]]
name = "s{i}"
command = ["x"]
grid = { i = [1, 2] }
retries = 3
"#)
    .unwrap();
    let rule = |name: &str| {
        let r = runs.iter().find(|r| r.name == name).unwrap().retry;
        r.with_flags(9, RetryOn::Oom)
    };
    assert_eq!(rule("plain"), (1, RetryOn::Any));
    assert_eq!(rule("own"), (0, RetryOn::Oom));
    assert_eq!(rule("s1"), (3, RetryOn::Any));
    assert_eq!(rule("s2"), (3, RetryOn::Any));
    // Nothing in the manifest: the flags.
    let runs = p("[[run]]\ncommand = ['x']\n").unwrap();
    assert_eq!(runs[0].retry, Rule::default());
    assert_eq!(runs[0].retry.with_flags(2, RetryOn::Any), (2, RetryOn::Any));
}

#[test]
fn bad_retries_name_the_line_and_what_is_valid() {
    let cases = [
        ("[defaults]\nretries = -1\n[[run]]\ncommand = ['x']\n", 2, "retries = -1 is not valid; use a whole number from 0 to 100"),
        ("[[run]]\ncommand = ['x']\nretries = 101\n", 3, "retries = 101 is not valid"),
        ("[[run]]\ncommand = ['x']\nretries = '2'\n", 3, "retries = \"2\" is not valid"),
        ("[[run]]\ncommand = ['x']\nretries = 1.5\n", 3, "retries = 1.5 is not valid"),
        (
            "[[sweep]]\ncommand = ['x']\ngrid = { i = [1] }\nretry_on = 'OOM'\n",
            4,
            "retry_on: \"OOM\" is not valid; use oom (CUDA out of memory) or any (any failure or timeout)",
        ),
        ("[[run]]\ncommand = ['x']\nretry_on = true\n", 3, "retry_on = true is not valid; use oom"),
    ];
    for (text, line, want) in cases {
        let e = p(text).unwrap_err();
        assert_eq!(e.line, Some(line), "{text}: {e}");
        assert!(e.msg.contains(want), "{text}: {e}");
    }
}
