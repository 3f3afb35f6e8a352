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
