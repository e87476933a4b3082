//! The table is the one list: the grammar parses exactly its rows, and
//! README's and SKILL.md's subcommand tables name exactly its subcommands
//! (as `Rule::ALL` is held against the refusal table).

use super::*;

fn names_in_table(doc: &str, heading: &str) -> Vec<String> {
    let section = doc
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("no {heading:?} section"));
    let mut names = Vec::new();
    for line in section.lines().skip_while(|l| !l.starts_with('|')) {
        if !line.starts_with('|') {
            break;
        }
        let first_cell = line.split('|').nth(1).unwrap_or_default();
        for quoted in first_cell.split('`').skip(1).step_by(2) {
            let word = quoted.split_whitespace().next().unwrap_or_default();
            // `--url <pattern>` in a cell is a flag of the row's subcommand.
            if !word.is_empty() && !word.starts_with('-') && !names.iter().any(|n| n == word) {
                names.push(word.to_owned());
            }
        }
    }
    names
}

fn every_name_and_alias() -> Vec<&'static str> {
    Subcommand::ALL
        .iter()
        .flat_map(|s| std::iter::once(s.facts().name).chain(s.facts().aliases.iter().copied()))
        .collect()
}

#[test]
fn names_and_aliases_are_unique_and_each_finds_its_row() {
    let all = every_name_and_alias();
    for (i, name) in all.iter().enumerate() {
        assert!(!all[..i].contains(name), "{name} twice");
        let found = Subcommand::named(name).expect("named");
        let facts = found.facts();
        assert!(facts.name == *name || facts.aliases.contains(name));
    }
    assert_eq!(Subcommand::named("eval"), None);
}

#[test]
fn the_readme_and_skill_tables_name_exactly_the_tables_subcommands() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README");
    let skill =
        std::fs::read_to_string(root.join("skills/browser-shell/SKILL.md")).expect("SKILL.md");
    let mut want: Vec<&str> = every_name_and_alias();
    want.sort_unstable();
    let mut readme_names = names_in_table(&readme, "### Subcommands");
    readme_names.sort();
    assert_eq!(readme_names, want, "README's subcommand table");
    let mut skill_names = names_in_table(&skill, "## Subcommands, one example each");
    skill_names.sort();
    let mut canonical: Vec<&str> = Subcommand::ALL.iter().map(|s| s.facts().name).collect();
    canonical.sort_unstable();
    skill_names.dedup();
    assert_eq!(skill_names, canonical, "SKILL.md's subcommand table");
}

#[test]
fn only_fill_and_type_take_secrets_and_only_close_ends_the_session() {
    for s in Subcommand::ALL {
        let f = s.facts();
        assert_eq!(
            f.secrets_at.is_some(),
            matches!(f.name, "fill" | "type"),
            "{}",
            f.name
        );
        assert_eq!(f.ends_session, f.name == "close", "{}", f.name);
        assert_eq!(f.guard == GuardBy::Nothing, f.ends_session, "{}", f.name);
        if let Some(at) = f.secrets_at {
            assert!(f.typed_from.is_some_and(|from| from <= at), "{}", f.name);
        }
    }
}

#[test]
fn a_command_that_only_reads_leaves_no_evidence_and_ends_no_session() {
    let reads: Vec<&str> = Subcommand::ALL
        .iter()
        .map(|s| s.facts())
        .filter(|f| f.reads_only)
        .inspect(|f| {
            assert_eq!(f.witness, Witness::Nothing, "{}", f.name);
            assert!(!f.ends_session && f.typed_from.is_none(), "{}", f.name);
        })
        .map(|f| f.name)
        .collect();
    assert_eq!(reads, ["snapshot", "get"]);
}
