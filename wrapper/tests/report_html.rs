//! `colloc report --html` (issue 38) read by its real consumer, a headless browser
//! (Debian's Chromium): the page loads offline, its text says what the report says, its
//! three charts decode as images, and a hostile grid value stays text — no element, no
//! script — under a policy that would block a script anyway.
//!
//! Without a browser the tests say so and pass, unless `COLLOC_REQUIRE_BROWSER` is set
//! (scripts/test.sh sets it; scripts/install-deps.sh installs `chromium`).

mod run_support;

use std::path::{Path, PathBuf};
use std::process::Command as Std;

use assert_cmd::Command;
use run_support::Env;

/// What a grid value may hold: markup, an event handler, quotes and an ampersand.
const HOSTILE: &str = "<img src=x onerror=alert(1)>&\"'";

fn browser() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|b| {
            std::env::var_os("PATH").and_then(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join(b))
                    .find(|f| f.is_file())
            })
        });
    if found.is_none() {
        assert!(
            std::env::var_os("COLLOC_REQUIRE_BROWSER").is_none(),
            "COLLOC_REQUIRE_BROWSER is set but no chromium is installed (apt-get install chromium)"
        );
        eprintln!("no chromium on PATH: the page is not checked in a browser");
    }
    found
}

/// The DOM the browser built from `page`, serialized after load.
fn dom(browser: &Path, page: &Path, home: &Path) -> String {
    let out = Std::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--dump-dom",
        ])
        .arg(format!("file://{}", page.display()))
        // Its profile and caches in the test's own directory.
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A finished pack of three runs: `r1` and `r2` print 100 and 300 img/s for a second;
/// `bad` fails. Every run carries the hostile grid value.
fn pack(env: &Env) {
    let m = env.manifest(&format!(
        "[[sweep]]\nname = 'r{{k}}'\n\
         command = ['sh', '-c', 'for i in 1 2 3 4 5 6 7 8 9 10; do echo img/s=$0; sleep 0.1; done', '{{rate}}', '{{note}}']\n\
         grid = {{ k = ['1'], rate = ['100'], note = [{hostile:?}] }}\n\
         [[sweep]]\nname = 'r2'\n\
         command = ['sh', '-c', 'for i in 1 2 3 4 5 6 7 8 9 10; do echo img/s=300; sleep 0.1; done', '{{note}}']\n\
         grid = {{ note = [{hostile:?}] }}\n\
         [[run]]\nname = 'bad'\ncommand = ['sh', '-c', 'exit 3']\n",
        hostile = HOSTILE
    ));
    let out = env
        .colloc()
        .args(["-j", "3", "-f"])
        .arg(&m)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "one run fails: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn html(env: &Env) -> String {
    let out = Command::cargo_bin("colloc")
        .unwrap()
        .env("COLLOC_CONFIG", env.path().join("no-config.toml"))
        .args(["report", "--html"])
        .arg(env.report_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_page_is_self_contained_and_escapes_what_the_runs_carry() {
    let env = Env::new();
    pack(&env);
    let page = html(&env);
    assert!(page.starts_with("<!DOCTYPE html>"), "{}", &page[..80]);
    assert!(!page.contains("<script"), "no script");
    assert!(
        !page.contains(HOSTILE),
        "the hostile value reached the page raw"
    );
    assert!(
        page.contains("&lt;img src=x onerror=alert(1)&gt;&amp;&quot;&#39;"),
        "the hostile value, escaped"
    );
    // Nothing is fetched: every src is a data: URL, and there is no link to follow.
    for (i, _) in page.match_indices("src=\"") {
        assert!(
            page[i..].starts_with("src=\"data:image/png;base64,"),
            "{}",
            &page[i..i + 40]
        );
    }
    assert!(!page.contains("http://") && !page.contains("https://"));
    // Printing writes nothing into DIR (as --json and --csv).
    assert!(!env.report_dir().join("colloc-report.html").exists());
}

#[test]
fn a_browser_shows_the_reports_figures_and_draws_its_charts() {
    let Some(browser) = browser() else { return };
    let env = Env::new();
    pack(&env);
    let page = html(&env);
    let file = env.path().join("report.html");
    std::fs::write(&file, &page).unwrap();
    let home = env.path().join("browser-home");
    std::fs::create_dir(&home).unwrap();

    let shown = dom(&browser, &file, &home);
    // The summary, each run with its state and grid value, and the table's figures.
    assert!(
        shown.contains("3 runs: 2 succeeded, 1 failed"),
        "{}",
        &shown[..shown.len().min(2000)]
    );
    for want in [
        "<td>r1</td>",
        "<td>r2</td>",
        "<td>bad</td>",
        "<th>grid_note</th>",
        "<th>grid_rate</th>",
        "class=\"state-failed\"",
    ] {
        assert!(shown.contains(want), "{want} not in the page");
    }
    // The browser kept the hostile value as text: it made no element of it.
    assert!(
        !shown.contains("<img src=\"x\""),
        "the grid value became an element"
    );
    assert!(shown.contains("&lt;img src=x onerror=alert(1)&gt;&amp;\"'"));

    // The charts decode: a copy of the page with a script (and without the policy, which
    // would block it) writes every image's natural size into the DOM.
    let csp = format!(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"{}\">",
        "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
    );
    assert!(page.contains(&csp), "the page carries its policy");
    let probe = page.replace(&csp, "").replace(
        "</body>",
        "<script>document.body.setAttribute('data-images', Array.from(document.images)\
         .map(i => i.complete + ':' + i.naturalWidth + 'x' + i.naturalHeight).join(' '))\
         </script></body>",
    );
    let probe_file = env.path().join("probe.html");
    std::fs::write(&probe_file, probe).unwrap();
    let shown = dom(&browser, &probe_file, &home);
    let images = shown
        .split("data-images=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("the probe ran");
    let sizes: Vec<&str> = images.split(' ').collect();
    assert_eq!(sizes.len(), 3, "three charts: {images}");
    for s in sizes {
        let (done, wh) = s.split_once(':').unwrap();
        let (w, h) = wh.split_once('x').unwrap();
        assert_eq!(done, "true", "{s}");
        assert!(
            w.parse::<u32>().unwrap() >= 600 && h.parse::<u32>().unwrap() >= 200,
            "{s}"
        );
    }

    // The policy is there for a reason: the same probe with the policy kept does not run.
    let blocked = page.replace(
        "</body>",
        "<script>document.body.setAttribute('data-ran', 'yes')</script></body>",
    );
    let blocked_file = env.path().join("blocked.html");
    std::fs::write(&blocked_file, blocked).unwrap();
    // (the script's own text names the attribute; the attribute set would read data-ran="yes")
    assert!(!dom(&browser, &blocked_file, &home).contains("data-ran=\"yes\""));
}
