//! The SPANK framework: one trait whose methods are the SPANK callbacks,
//! with no-op defaults, and [`crate::spank_plugin!`] to export the symbols.
//!
//! ```ignore
//! #[derive(Default)]
//! struct Hello;
//! impl cder_slurm::spank::Plugin for Hello {
//!     fn init(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
//!         cder_slurm::sys::log(Level::Info, &format!("hello from {:?}", spank.context()));
//!         Ok(())
//!     }
//! }
//! cder_slurm::spank_plugin!("hello", Hello);
//! ```

use std::sync::Mutex;

pub use crate::sys::spank::{Context, Spank, SpankError, SpankOption};

/// What every callback returns.
pub type SpankResult = Result<(), SpankError>;

/// The SPANK callbacks, by exported symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Callback {
    /// `slurm_spank_init`.
    Init,
    /// `slurm_spank_job_prolog`.
    JobProlog,
    /// `slurm_spank_init_post_opt`.
    InitPostOpt,
    /// `slurm_spank_local_user_init`.
    LocalUserInit,
    /// `slurm_spank_user_init`.
    UserInit,
    /// `slurm_spank_task_init_privileged`.
    TaskInitPrivileged,
    /// `slurm_spank_task_init`.
    TaskInit,
    /// `slurm_spank_task_post_fork`.
    TaskPostFork,
    /// `slurm_spank_task_exit`.
    TaskExit,
    /// `slurm_spank_job_epilog`.
    JobEpilog,
    /// `slurm_spank_slurmd_exit`.
    SlurmdExit,
    /// `slurm_spank_exit`.
    Exit,
}

impl Callback {
    /// The C symbol SLURM calls.
    pub fn symbol(self) -> &'static str {
        match self {
            Callback::Init => "slurm_spank_init",
            Callback::JobProlog => "slurm_spank_job_prolog",
            Callback::InitPostOpt => "slurm_spank_init_post_opt",
            Callback::LocalUserInit => "slurm_spank_local_user_init",
            Callback::UserInit => "slurm_spank_user_init",
            Callback::TaskInitPrivileged => "slurm_spank_task_init_privileged",
            Callback::TaskInit => "slurm_spank_task_init",
            Callback::TaskPostFork => "slurm_spank_task_post_fork",
            Callback::TaskExit => "slurm_spank_task_exit",
            Callback::JobEpilog => "slurm_spank_job_epilog",
            Callback::SlurmdExit => "slurm_spank_slurmd_exit",
            Callback::Exit => "slurm_spank_exit",
        }
    }
}

/// A SPANK plugin. One value lives per process (created with `Default`);
/// SLURM calls the methods in the order its documentation gives, in the
/// contexts it gives. `args` are the words after the path in plugstack.conf.
#[allow(unused_variables)]
pub trait Plugin: Default + Send + 'static {
    /// The options to register (in every context, from `slurm_spank_init`).
    fn options() -> Vec<SpankOption> {
        Vec::new()
    }
    /// An option was given (`remote` in slurmstepd, where SLURM replays it).
    fn option(&mut self, name: &str, value: Option<&str>, remote: bool) -> SpankResult {
        Ok(())
    }
    /// `slurm_spank_init`: first in every context — in srun/sbatch/salloc
    /// (local/allocator) before options are read, in slurmstepd (remote) as it
    /// starts, in slurmd at start-up, and in the prolog/epilog helper. An error
    /// from a `required` plugin aborts the command, fails the step, or stops
    /// slurmd from starting.
    fn init(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        Ok(())
    }
    /// `slurm_spank_job_prolog`: in slurmd's prolog helper, as root, when the
    /// job's prolog runs on the node (job-script context; the environment is
    /// the prolog's, built by slurmd from the job's credential). An error fails
    /// the prolog: SLURM drains the node and requeues the job.
    fn job_prolog(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        Ok(())
    }
    /// `slurm_spank_init_post_opt`: after the options are processed — on the
    /// submit host before the job is submitted, in slurmstepd (as root) before
    /// the step's tasks are set up. An error aborts the command or fails the step.
    fn init_post_opt(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        Ok(())
    }
    /// `slurm_spank_local_user_init`: in srun only (local context), after the
    /// allocation and before the tasks are launched. An error aborts srun.
    fn local_user_init(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        Ok(())
    }
    /// `slurm_spank_user_init`: in slurmstepd, with the job user's credentials,
    /// before any task is forked. An error fails the step.
    fn user_init(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        Ok(())
    }
    /// `slurm_spank_task_init_privileged`: in each task's own process after the
    /// fork, still as root, before it becomes the job's user. An error stops
    /// the task from starting and fails the step.
    fn task_init_privileged(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        Ok(())
    }
    /// `slurm_spank_task_init`: in each task's process as the job's user, just
    /// before it execs; the last chance to set its environment. An error stops
    /// the task from starting and fails the step.
    fn task_init(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        Ok(())
    }
    /// `slurm_spank_task_post_fork`: in slurmstepd (as root) after each task is
    /// forked, on the parent's side. An error fails the step.
    fn task_post_fork(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        Ok(())
    }
    /// `slurm_spank_task_exit`: in slurmstepd (as root) as each task exits.
    /// An error is logged; the task has already ended.
    fn task_exit(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        Ok(())
    }
    /// `slurm_spank_job_epilog`: in slurmd's epilog helper, as root, when the
    /// job's epilog runs on the node (also after scancel). An error fails the
    /// epilog, and SLURM drains the node: return errors only for real damage.
    fn job_epilog(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        Ok(())
    }
    /// `slurm_spank_slurmd_exit`: in slurmd as it shuts down. An error is logged.
    fn slurmd_exit(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        Ok(())
    }
    /// `slurm_spank_exit`: last in every context — in srun/sbatch/salloc when
    /// the command ends, in slurmstepd (as root) before it exits. An error is
    /// logged; nothing is left to fail.
    fn exit(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        Ok(())
    }
}

/// Calls the method for `callback`.
pub(crate) fn call<P: Plugin>(plugin: &mut P, callback: Callback, spank: &Spank, args: &[String]) -> SpankResult {
    match callback {
        Callback::Init => plugin.init(spank, args),
        Callback::JobProlog => plugin.job_prolog(spank, args),
        Callback::InitPostOpt => plugin.init_post_opt(spank, args),
        Callback::LocalUserInit => plugin.local_user_init(spank, args),
        Callback::UserInit => plugin.user_init(spank, args),
        Callback::TaskInitPrivileged => plugin.task_init_privileged(spank, args),
        Callback::TaskInit => plugin.task_init(spank, args),
        Callback::TaskPostFork => plugin.task_post_fork(spank, args),
        Callback::TaskExit => plugin.task_exit(spank, args),
        Callback::JobEpilog => plugin.job_epilog(spank, args),
        Callback::SlurmdExit => plugin.slurmd_exit(spank, args),
        Callback::Exit => plugin.exit(spank, args),
    }
}

/// Runs `callback` on the process's plugin value (made on first use),
/// registering its options first when the callback is `slurm_spank_init`.
/// Called by [`crate::spank_plugin!`] inside [`crate::sys::spank::enter`].
#[doc(hidden)]
pub fn run<P: Plugin>(
    state: &Mutex<Option<P>>,
    callback: Callback,
    option_cb: crate::ffi::spank_opt_cb_f,
    spank: &Spank,
    args: &[String],
) -> SpankResult {
    let mut guard = state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let plugin = guard.get_or_insert_with(P::default);
    if callback == Callback::Init {
        for (i, option) in P::options().iter().enumerate() {
            spank.register_option(option, i as std::ffi::c_int, option_cb)?;
        }
    }
    call(plugin, callback, spank, args)
}

/// Runs the option callback of the process's plugin value for option number
/// `val` (its index in [`Plugin::options`]).
#[doc(hidden)]
pub fn run_option<P: Plugin>(
    state: &Mutex<Option<P>>,
    val: std::ffi::c_int,
    value: Option<&str>,
    remote: bool,
) -> SpankResult {
    let options = P::options();
    let opt = usize::try_from(val)
        .ok()
        .and_then(|i| options.get(i))
        .ok_or_else(|| SpankError::new(format!("unknown option number {val}")))?;
    let mut guard = state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    guard.get_or_insert_with(P::default).option(opt.name, value, remote)
}

/// Exports a SPANK plugin: the `plugin_name`, `plugin_type`,
/// `plugin_version` and `spank_plugin_version` symbols and every
/// `slurm_spank_*` callback, each dispatching to the [`crate::spank::Plugin`] methods of
/// one process-wide value of `$ty` (created with `Default`).
///
/// ```ignore
/// cder_slurm::spank_plugin!("cder", MyPlugin);
/// ```
#[macro_export]
macro_rules! spank_plugin {
    ($name:literal, $ty:ty) => {
        /// The plugin's name: SPANK options and log lines carry it.
        #[no_mangle]
        #[used]
        pub static plugin_name: [u8; $name.len() + 1] = $crate::nul_terminated::<{ $name.len() + 1 }>($name);
        /// `spank`: the plugin type SLURM's plugstack loader expects.
        #[no_mangle]
        #[used]
        pub static plugin_type: [u8; 6] = *b"spank\0";
        /// The SLURM release built against; the loader refuses a plugin
        /// built for another one.
        #[no_mangle]
        #[used]
        pub static plugin_version: u32 = $crate::SLURM_VERSION_NUMBER;
        /// The SPANK interface version (0, the only one there is).
        #[no_mangle]
        #[used]
        pub static spank_plugin_version: u32 = 0;

        static __CDER_SPANK_STATE: ::std::sync::Mutex<::std::option::Option<$ty>> = ::std::sync::Mutex::new(None);

        unsafe extern "C" fn __cder_spank_option(
            val: ::std::ffi::c_int,
            optarg: *const ::std::ffi::c_char,
            remote: ::std::ffi::c_int,
        ) -> ::std::ffi::c_int {
            // SAFETY: SLURM passes a valid (or null) option argument.
            unsafe {
                $crate::sys::spank::enter_option($name, optarg, |value| {
                    $crate::spank::run_option::<$ty>(&__CDER_SPANK_STATE, val, value, remote != 0)
                })
            }
        }

        $crate::spank_plugin!(@callbacks $name, $ty,
            slurm_spank_init => Init,
            slurm_spank_job_prolog => JobProlog,
            slurm_spank_init_post_opt => InitPostOpt,
            slurm_spank_local_user_init => LocalUserInit,
            slurm_spank_user_init => UserInit,
            slurm_spank_task_init_privileged => TaskInitPrivileged,
            slurm_spank_task_init => TaskInit,
            slurm_spank_task_post_fork => TaskPostFork,
            slurm_spank_task_exit => TaskExit,
            slurm_spank_job_epilog => JobEpilog,
            slurm_spank_slurmd_exit => SlurmdExit,
            slurm_spank_exit => Exit
        );
    };
    (@callbacks $name:literal, $ty:ty, $($sym:ident => $cb:ident),*) => {
        $(
            #[doc = concat!("The SPANK callback `", stringify!($sym), "`: runs the plugin's `Callback::", stringify!($cb), "` method (the `Plugin` trait says when SLURM calls it and what an error costs).")]
            ///
            /// # Safety
            ///
            /// Only SLURM calls it, with a live handle and `ac` plugstack arguments.
            #[no_mangle]
            pub unsafe extern "C" fn $sym(
                sp: $crate::ffi::spank_t,
                ac: ::std::ffi::c_int,
                av: *mut *mut ::std::ffi::c_char,
            ) -> ::std::ffi::c_int {
                // SAFETY: SLURM passes a valid handle and `ac` plugstack arguments.
                unsafe {
                    $crate::sys::spank::enter($name, stringify!($sym), sp, ac, av, |spank, args| {
                        $crate::spank::run::<$ty>(
                            &__CDER_SPANK_STATE,
                            $crate::spank::Callback::$cb,
                            Some(__cder_spank_option),
                            spank,
                            args,
                        )
                    })
                }
            }
        )*
    };
}
