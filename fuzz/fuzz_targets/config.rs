//! Fuzzes the config check: any text (read as TOML, then checked) is never a panic, and a refusal
//! is always one an operator can act on — every problem says what is wrong and names a key or a
//! line, and a line it names is one of the text's.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    let Err(error) = herdsman::Config::from_toml(text, "fuzz") else {
        return;
    };
    assert!(!error.problems.is_empty(), "a refusal without a problem");
    let lines = text.lines().count().max(1);
    for problem in &error.problems {
        assert!(!problem.message.is_empty(), "{problem:?}");
        assert!(
            !problem.key.is_empty() || problem.line.is_some(),
            "names neither a key nor a line: {problem:?}"
        );
        if let Some(line) = problem.line {
            assert!(
                (1..=lines + 1).contains(&line),
                "line {line} of {lines}: {problem:?}"
            );
        }
    }
});
