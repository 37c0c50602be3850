//! cder-sim's integration tests: the seeds reproduced (`seeds`), the
//! readers on the real traces (`traces`), the command line (`cli`).

mod cli;
mod seeds;
mod traces;
