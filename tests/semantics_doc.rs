//! Runs the examples of docs/semantics.md against a real mount: every
//! `$ command` in a ```sh block, with the lines after it as expected output.

mod common;

use common::Env;

/// (command, expected output lines) in document order.
fn examples(doc: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_sh = false;
    for line in doc.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        match line.strip_prefix("$ ") {
            Some(cmd) => out.push((cmd.to_string(), vec![])),
            None => out
                .last_mut()
                .expect("output before a command")
                .1
                .push(line.to_string()),
        }
    }
    out
}

#[test]
fn semantics_doc_examples_hold() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/semantics.md")).unwrap();
    let examples = examples(&doc);
    assert!(examples.len() >= 10, "examples not found");
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.csv"), "id,v\n1,2\n").unwrap();
    env.commit(&src, "one");
    let m = env.mount(&[]);
    for (cmd, want) in examples {
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("{cmd} 2>&1")])
            .current_dir(&m.dir)
            .output()
            .unwrap();
        let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(got, want, "`{cmd}`");
    }
}

/// Command lines of README.md's ```bash block that follows `heading`:
/// comments cut, optional `[...]` parts dropped (but `--daemon`, without
/// which a mount would hold the shell).
fn readme_block(readme: &str, heading: &str) -> Vec<String> {
    let start = readme.find(heading).expect("heading in README.md");
    let block = readme[start..]
        .split("```bash\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a bash block");
    block
        .lines()
        .map(|l| {
            let mut l = l
                .split("  #")
                .next()
                .unwrap()
                .replace("[--daemon]", "--daemon");
            while let Some(open) = l.find(" [") {
                let close = l[open..].find(']').expect("closed bracket") + open;
                l.replace_range(open..=close, "");
            }
            l.trim().to_string()
        })
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn readme_examples_run_for_a_new_user_on_the_embedded_store() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let home = tempfile::tempdir().unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_detafs"))
        .parent()
        .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    std::fs::create_dir_all(home.path().join("data/tables")).unwrap();
    std::fs::create_dir_all(home.path().join("new-data")).unwrap();
    std::fs::write(home.path().join("new-data/may.csv"), "day,mm\n1,3\n").unwrap();
    // A failing line must not leave the mount behind.
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("fusermount3")
                .arg("-uz")
                .arg(&self.0)
                .output();
        }
    }
    let _unmount = Unmount(home.path().join("weather"));
    let mut edits = 0;
    // Without a mount first: it creates the dataset the mount then shows.
    let lines = [
        readme_block(&readme, "Without a mount:"),
        readme_block(&readme, "## Using it"),
    ]
    .concat();
    assert!(lines.len() > 20, "{lines:?}");
    for line in &lines {
        // Between two commits the user changes something.
        if line.contains("commit") {
            edits += 1;
            let target = match line.contains("--from ./data") {
                true => home.path().join("data/tables/weather.csv"),
                false => home.path().join(format!("weather/staging/edit{edits}.csv")),
            };
            std::fs::write(target, format!("city,mm\nNairobi,{edits}\n")).unwrap();
        }
        let mut sh = std::process::Command::new("bash");
        sh.args(["-c", line])
            .current_dir(home.path())
            .env("HOME", home.path())
            .env("PATH", &path);
        for (k, _) in std::env::vars() {
            if k.starts_with("DETAFS_") || k.starts_with("XDG_") || k.starts_with("AWS_") {
                sh.env_remove(k);
            }
        }
        let out = sh.output().unwrap();
        assert!(
            out.status.success(),
            "README line `{line}` failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(home.path().join("restore/tables/weather.csv").exists());
}
