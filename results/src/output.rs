//! Output formats (issue 37, after hyperfine's `Exporter` and HyperQueue's `Output`): a
//! command builds one typed model of its result, then prints it in the format the user
//! chose by name. A format is one type implementing [`Exporter`] for that model and one
//! line in the command's [`Formats`] list; `--json`, `--csv`, `--quiet` are names for
//! the formats they always chose.
//!
//! A new format for `colloc status` is one file in `status/` with a type that implements
//! `Exporter<NodeStatus>` and its line in `status::FORMATS` (as `status/openmetrics.rs`).

use serde::Serialize;

use crate::bad_input;

/// One way to print a model `M`.
pub trait Exporter<M>: Sync {
    /// Its name, as `--format` takes it.
    fn name(&self) -> &'static str;
    /// The model as this format prints it: the whole of stdout.
    ///
    /// # Errors
    /// The model could not be encoded (a JSON or CSV writer failed).
    fn render(&self, model: &M) -> anyhow::Result<String>;
}

/// The formats a command offers, its default first.
pub struct Formats<M: 'static> {
    /// The command, for the message about an unknown name (`colloc status`).
    pub command: &'static str,
    /// The formats.
    pub list: &'static [&'static dyn Exporter<M>],
}

impl<M> Formats<M> {
    /// The format called `name`, or the default where none is named.
    ///
    /// # Errors
    /// Bad input (exit 2): no format has that name; the line lists the names there are.
    pub fn pick(&self, name: Option<&str>) -> anyhow::Result<&'static dyn Exporter<M>> {
        let Some(name) = name else {
            return Ok(self.list[0]);
        };
        self.list
            .iter()
            .copied()
            .find(|e| e.name() == name)
            .ok_or_else(|| {
                bad_input(format!(
                    "{} has no format {:?}; its formats are: {}",
                    self.command,
                    name,
                    self.names().join(", ")
                ))
            })
    }

    /// The names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.list.iter().map(|e| e.name()).collect()
    }
}

/// Render `model` with `exporter` and print it on stdout.
///
/// # Errors
/// As [`Exporter::render`].
pub fn print<M>(exporter: &dyn Exporter<M>, model: &M) -> anyhow::Result<()> {
    let text = exporter.render(model)?;
    use std::io::Write as _;
    // A closed stdout (`| head`) is not an error of the command.
    let _ = write!(std::io::stdout().lock(), "{text}");
    Ok(())
}

/// JSON of any serializable model: pretty, control characters a terminal would act on
/// escaped, one newline at the end; keys in the model's order, or sorted.
pub struct Json {
    sorted: bool,
}

impl Json {
    /// Keys in the order the model declares them (the run report, whose files keep it).
    pub const DECLARED: Json = Json { sorted: false };
    /// Keys in alphabetical order at every level, whatever the model declares (what
    /// `colloc status` and `colloc plan` have always printed: the model goes through
    /// `serde_json::Value`, whose maps are sorted).
    pub const SORTED: Json = Json { sorted: true };
}

impl<M: Serialize> Exporter<M> for Json {
    fn name(&self) -> &'static str {
        "json"
    }

    fn render(&self, model: &M) -> anyhow::Result<String> {
        let text = if self.sorted {
            serde_json::to_string_pretty(&serde_json::to_value(model)?)?
        } else {
            serde_json::to_string_pretty(model)?
        };
        Ok(format!("{}\n", crate::text::json_for_terminal(&text)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Shout;
    impl Exporter<String> for Shout {
        fn name(&self) -> &'static str {
            "shout"
        }
        fn render(&self, model: &String) -> anyhow::Result<String> {
            Ok(model.to_uppercase())
        }
    }

    const FORMATS: Formats<String> = Formats {
        command: "colloc test",
        list: &[&Shout, &Json::SORTED],
    };

    #[test]
    fn a_format_is_chosen_by_name_and_the_first_is_the_default() {
        let m = "hi\u{9b}".to_string();
        assert_eq!(FORMATS.pick(None).unwrap().render(&m).unwrap(), "HI\u{9b}");
        let json = FORMATS.pick(Some("json")).unwrap().render(&m).unwrap();
        assert_eq!(json, "\"hi\\u009b\"\n");
        assert_eq!(FORMATS.names(), ["shout", "json"]);
    }

    #[test]
    fn an_unknown_format_is_bad_input_that_lists_the_names() {
        let e = FORMATS.pick(Some("xml")).err().unwrap();
        assert!(e.downcast_ref::<crate::BadInput>().is_some());
        assert_eq!(
            e.to_string(),
            "colloc test has no format \"xml\"; its formats are: shout, json"
        );
    }

    #[test]
    fn json_keys_come_sorted_or_in_the_models_order() {
        #[derive(Serialize)]
        struct M {
            zeta: u32,
            alpha: Option<u32>,
        }
        let m = M {
            zeta: 1,
            alpha: None,
        };
        let json = Json::SORTED.render(&m).unwrap();
        assert_eq!(json, "{\n  \"alpha\": null,\n  \"zeta\": 1\n}\n");
        let json = Json::DECLARED.render(&m).unwrap();
        assert_eq!(json, "{\n  \"zeta\": 1,\n  \"alpha\": null\n}\n");
    }
}
