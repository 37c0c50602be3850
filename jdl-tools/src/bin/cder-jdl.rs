//! `cder-jdl`: the ClassAd / gLite JDL tool.

use std::io::Read;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use cder_jdl::jdl::{check, Severity};
use cder_jdl::{eval_expr, parse_classad, parse_expr, ClassAd};

const EXAMPLES: &str = "\
Examples:
  cder-jdl eval '1 + 2.5'                          # 3.5
  cder-jdl eval --json 'strcat(\"a\", 1)'           # {\"type\":\"string\",\"value\":\"a1\"}
  cder-jdl eval --ad job.jdl 'GPGPUPerNode * 2'
  cder-jdl check job.jdl

Exit status: 0 success, 1 runtime failure, 2 bad input or usage.";

/// The ClassAd / gLite JDL language: evaluate expressions and check job descriptions.
#[derive(Parser)]
#[command(
    name = "cder-jdl",
    version,
    about = "Evaluate ClassAd expressions and check gLite JDL job descriptions",
    long_about = "Evaluate ClassAd expressions and check gLite JDL job descriptions.\n\n\
The language is HTCondor's ClassAd language as gLite's JDL uses it: `[ Name = expr; ... ]` ads, \
lists `{ ... }`, three-valued logic with undefined and error, attribute references with MY., \
OTHER./TARGET. and PARENT. scopes, and HTCondor's built-in functions. Ads may also be written one \
`Name = expr` per line, as `condor_status -l` prints them. Errors are printed on stderr as \
FILE:LINE:COL: message.",
    after_long_help = EXAMPLES
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Evaluate an expression and print its value.
    #[command(
        long_about = "Evaluate an expression and print its value in ClassAd syntax.\n\n\
With --ad, unqualified attribute names and MY. refer to that ad. With --json, print \
{\"type\": T, \"value\": V} where T is boolean, integer, real, string, undefined, error, list or \
classad, and V the natural JSON value (a list of such objects for lists, null for undefined and \
error, an object of such objects for classads).",
        after_long_help = EXAMPLES
    )]
    Eval {
        /// A ClassAd / JDL file providing the scope (`-` for standard input).
        #[arg(long, value_name = "FILE")]
        ad: Option<String>,
        /// Print {"type": T, "value": V} instead of ClassAd syntax.
        #[arg(long)]
        json: bool,
        /// The expression.
        expr: String,
    },
    /// Check a JDL file and report every problem with line:column.
    #[command(
        long_about = "Check a JDL file and report every problem with line:column on stderr.\n\n\
Checked: syntax; Requirements that cannot be boolean-valued; GPGPUPerNode and \
VirtualGPGPUPerNode that are not positive integers; VirtualGPGPUMethod (alias VirtualGPGPUType) \
other than rCUDA or VCL. Calls to unknown functions are warnings. Exit status 2 when there is \
an error, 0 otherwise.",
        after_long_help = EXAMPLES
    )]
    Check {
        /// The JDL file (`-` for standard input).
        file: String,
    },
}

fn read_input(path: &str) -> Result<String, String> {
    if path == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(|e| format!("-: cannot read standard input: {e}"))?;
        return Ok(s);
    }
    std::fs::read_to_string(path).map_err(|e| format!("{path}: cannot read: {e}"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Eval { ad, json, expr } => {
            let scope = match ad {
                Some(path) => {
                    let src = match read_input(&path) {
                        Ok(s) => s,
                        Err(e) => {
                            eprintln!("{e}");
                            return ExitCode::from(2);
                        }
                    };
                    match parse_classad(&src) {
                        Ok(a) => Some(a),
                        Err(e) => {
                            eprintln!("{path}:{e}");
                            return ExitCode::from(2);
                        }
                    }
                }
                None => None::<ClassAd>,
            };
            let e = match parse_expr(&expr) {
                Ok(e) => e,
                Err(e) => {
                    eprintln!("<expr>:{e}");
                    return ExitCode::from(2);
                }
            };
            let v = eval_expr(&e, scope.as_ref(), None);
            if json {
                println!("{}", v.to_json());
            } else {
                println!("{v}");
            }
            ExitCode::SUCCESS
        }
        Cmd::Check { file } => {
            let src = match read_input(&file) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            let diags = check(&src);
            let mut errors = 0;
            for d in &diags {
                if d.severity == Severity::Error {
                    errors += 1;
                }
                eprintln!("{file}:{d}");
            }
            if errors > 0 {
                ExitCode::from(2)
            } else {
                println!("{file}: ok{}", if diags.is_empty() { String::new() } else { format!(" ({} warnings)", diags.len()) });
                ExitCode::SUCCESS
            }
        }
    }
}
