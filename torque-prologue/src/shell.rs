//! Rendering a job's environment for a POSIX shell, as `cder-env --shell`
//! prints it for `eval "$(cder-env --shell)"`.

use cder_model::JobEnvironment;

/// Quotes `value` for a POSIX shell: single quotes, with each `'` written
/// as `'\''`. Nothing inside single quotes is special to the shell.
pub fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// Whether `name` can be a shell variable: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A variable name the shell cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a shell variable name")]
pub struct BadName(pub String);

/// `NAME='value'; readonly NAME; export NAME` lines: the variables are
/// exported and read-only, so that a job cannot (inadvertently) widen its
/// own device list, as the seed thesis made CUDA_VISIBLE_DEVICES read-only.
pub fn sh_exports(env: &JobEnvironment, readonly: bool) -> Result<String, BadName> {
    let mut out = String::new();
    for (name, value) in &env.0 {
        if !is_variable_name(name) {
            return Err(BadName(name.clone()));
        }
        out.push_str(&format!("{name}={}; export {name}", quote(value)));
        if readonly {
            out.push_str(&format!("; readonly {name}"));
        }
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::process::Command;

    #[test]
    fn quoting_survives_a_real_shell() {
        for value in ["", "1,3", "it's", "$(rm -rf /)", "a\nb", "`x` \\ \" ' ;|&", "GPU-6f1a,GPU-77"] {
            let out = Command::new("sh").arg("-c").arg(format!("printf %s {}", quote(value))).output().unwrap();
            assert_eq!(String::from_utf8(out.stdout).unwrap(), value);
        }
    }

    #[test]
    fn names() {
        assert!(is_variable_name("CUDA_VISIBLE_DEVICES"));
        assert!(is_variable_name("_x1"));
        assert!(!is_variable_name("1X"));
        assert!(!is_variable_name("A-B"));
        assert!(!is_variable_name(""));
        assert!(!is_variable_name("X;rm"));
    }

    #[test]
    fn exports_are_readonly_in_a_real_shell() {
        let env = JobEnvironment(BTreeMap::from([
            ("CUDA_VISIBLE_DEVICES".to_string(), "1,3".to_string()),
            ("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".to_string()),
        ]));
        let script = sh_exports(&env, true).unwrap();
        assert_eq!(
            script,
            "CUDA_DEVICE_ORDER='PCI_BUS_ID'; export CUDA_DEVICE_ORDER; readonly CUDA_DEVICE_ORDER\n\
             CUDA_VISIBLE_DEVICES='1,3'; export CUDA_VISIBLE_DEVICES; readonly CUDA_VISIBLE_DEVICES\n"
        );
        // Exported to children, and an assignment afterwards fails.
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("{script}sh -c 'echo $CUDA_VISIBLE_DEVICES'; (CUDA_VISIBLE_DEVICES=0) 2>/dev/null && echo changed || echo kept"))
            .env_remove("CUDA_VISIBLE_DEVICES")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "1,3\nkept\n");
        let bad = JobEnvironment(BTreeMap::from([("X;rm".to_string(), String::new())]));
        assert!(sh_exports(&bad, true).is_err());
    }
}
