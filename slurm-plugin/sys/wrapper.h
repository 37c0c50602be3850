/* The SLURM API the cder plugins use: the public headers of the installed
 * release, plus the few libslurmfull symbols every C plugin links against
 * but that no public header declares. What differs between releases is
 * keyed by SLURM_VERSION_NUMBER here, where the headers are read, and in
 * cder-slurm's sys module (its build.rs names each change). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <slurm/spank.h>
#include <slurm/slurm_version.h>

/* src/common/xstring.h: strings handed to SLURM must come from its allocator. */
extern char *slurm_xstrdup(const char *str);
/* src/common/xmalloc.h (the same in 22.05 to 26.05) */
extern void slurm_xfree(void **item);
extern void *slurm_xcalloc(size_t count, size_t size, bool clear, bool try_,
                           const char *file, int line, const char *func);
/* src/common/slurm_protocol_defs.h (the same in 22.05 to 26.05): frees a job
 * description and its strings, as slurmctld frees its own copies. */
extern void slurm_free_job_desc_msg(job_desc_msg_t *msg);
/* src/common/read_config.h: the running daemon's parsed slurm.conf. */
extern slurm_conf_t slurm_conf;

/* 24.11 made the show flags SLURM_BIT(n), a macro bindgen cannot
 * evaluate; the compiler evaluates an enum constant in every release. */
enum cder_show_flags { CDER_SHOW_DETAIL = SHOW_DETAIL };
