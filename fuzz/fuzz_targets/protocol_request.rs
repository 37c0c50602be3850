//! cderd's socket protocol: one request line as the daemon reads it, and
//! one reply line as the clients (cderctl, the SLURM plugin, the TORQUE
//! hooks) read it. Any line must give a request or a bad_request, never a
//! panic; an accepted request must survive its own encoding unchanged.
#![no_main]

use cder_protocol::Request;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = Request::from_line(data) {
        let line = request.to_line();
        let again = Request::from_line(line.as_bytes())
            .unwrap_or_else(|e| panic!("{line:?} was accepted once but not again: {e:?}"));
        assert_eq!(again, request, "{line:?} does not round-trip");
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = cder_protocol::parse_reply(text);
    }
});
