// SPDX-License-Identifier: GPL-2.0
/*
 * insn_count.c - a QEMU TCG plugin that counts the instructions a guest
 * executes, for measuring the work per RPC independently of the host's
 * speed (Documentation/benchmarks.rst, "Counting instructions").
 *
 * Load it with
 *   -plugin insn_count.so,out=PATH[,range=RPATH][,every=MS][,kernel=0|1]
 * on a guest with one vCPU. Every translated block, when it runs, adds its
 * instruction count to one counter and one to another (inline adds: no
 * helper call, and no race with one vCPU thread). Blocks that start inside
 * the address range last read from RPATH ("START END", hexadecimal guest
 * virtual addresses, END exclusive; a module's code, say) add to two more
 * counters. A thread writes the running totals, "INSTRUCTIONS BLOCKS
 * RANGE_INSTRUCTIONS RANGE_BLOCKS" in decimal, to PATH every MS
 * milliseconds (default 10), by writing PATH.tmp and renaming it over
 * PATH, so a reader never sees torn numbers; and reads RPATH again. A
 * halted vCPU executes nothing, so an idle guest's counts stand still.
 *
 * The range applies to blocks translated after it was read: write RPATH
 * before the code in it first runs (a module's code is translated afresh
 * when it is loaded, as loading writes its pages).
 *
 * Each block in the range also gets a counter of its own; with kernel=1,
 * so does every block at a kernel address (the upper half of the address
 * space) from boot on. When a file PATH.blocks.req appears, the thread
 * writes these counters to PATH.blocks, one "ADDRESS INSTRUCTIONS RUNS"
 * line (hexadecimal address) per block translated so far, and then
 * removes the request: an exact profile of the code in the range, or of
 * the whole kernel. A reader creates the request and waits for it to go.
 *
 * The last two fields are the host's side of the same work:
 * TRANSLATIONS counts the blocks QEMU has translated (a guest that makes
 * QEMU throw translated code away, by writing into a page that holds
 * some, has it translated again), HOST_CPU_US the CPU time the whole QEMU
 * process has used (user and system, every thread: the vCPU, device
 * emulation, the network backend). Two guests that execute the same
 * instructions may still cost the host different time; these say how much
 * and whether retranslation is why.
 *
 * Blocks matter because under TCG every block entered costs on top of its
 * instructions (a lookup after each return or indirect jump, and the
 * block's prologue): two guests with the same instruction count can take
 * different times if one of them branches and calls more.
 *
 * QEMU's plugin header is not packaged on Debian 12: the few declarations
 * used here follow QEMU 7.2's documented plugin API (plugin version 1).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* The QEMU plugin API (see QEMU's docs/devel/tcg-plugins.rst). */
typedef uint64_t qemu_plugin_id_t;
struct qemu_info_t;
struct qemu_plugin_tb;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op,
					      void *ptr, uint64_t imm);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);

#define EXPORT __attribute__((visibility("default")))

EXPORT int qemu_plugin_version = 1;

/* Added to by the translated code of the (single) vCPU thread. */
static uint64_t executed, blocks, range_executed, range_blocks;
/* Blocks translated; incremented by the vCPU thread only. */
static uint64_t translations;
/* The range, as the writer thread last read it. */
static uint64_t range_start, range_end;
static char *out_path, *tmp_path, *range_path, *blocks_path, *blocks_tmp, *blocks_req;
/* kernel=1: a counter for every block at a kernel address. */
static bool kernel_blocks;

/* One translated block with a counter of its own. Pushed by the vCPU
 * thread, read by the writer thread; never freed (a few thousand in a
 * module's range; with kernel=1 one per translation of a kernel block,
 * some hundreds of thousands, a few MiB). */
struct block {
	uint64_t pc, insns, runs;
	struct block *next;
};
static struct block *block_list;
static unsigned int every_ms = 10;
static pthread_t writer;
static volatile bool stopping;

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	uint64_t n = qemu_plugin_tb_n_insns(tb);
	uint64_t pc = qemu_plugin_tb_vaddr(tb);
	bool in_range = pc >= __atomic_load_n(&range_start, __ATOMIC_RELAXED) &&
			pc < __atomic_load_n(&range_end, __ATOMIC_RELAXED);

	(void)id;
	__atomic_store_n(&translations, translations + 1, __ATOMIC_RELAXED);
	qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &executed, n);
	qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &blocks, 1);
	if (in_range) {
		qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64,
							 &range_executed, n);
		qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64,
							 &range_blocks, 1);
	}
	if (in_range || (kernel_blocks && (pc >> 63))) {
		struct block *b = calloc(1, sizeof(*b));

		if (b) {
			b->pc = pc;
			b->insns = n;
			qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64,
								 &b->runs, 1);
			b->next = block_list;
			__atomic_store_n(&block_list, b, __ATOMIC_RELEASE);
		}
	}
}

/* Writes every block's counter to blocks_path. The vCPU runs on
 * meanwhile: the counters are copied first, in one quick pass, so that
 * the reading is one moment's (formatting them takes far longer, and
 * blocks formatted late would count work done after the early ones). */
static void publish_blocks(void)
{
	struct snap { uint64_t pc, insns, runs; } *s = NULL, *grown;
	size_t n = 0, cap = 0;
	FILE *f;

	for (struct block *b = __atomic_load_n(&block_list, __ATOMIC_ACQUIRE); b; b = b->next) {
		if (n == cap) {
			cap = cap ? 2 * cap : 65536;
			grown = realloc(s, cap * sizeof(*s));
			if (!grown) {
				free(s);
				return;
			}
			s = grown;
		}
		s[n].pc = b->pc;
		s[n].insns = b->insns;
		s[n++].runs = __atomic_load_n(&b->runs, __ATOMIC_RELAXED);
	}
	f = fopen(blocks_tmp, "w");
	if (f) {
		for (size_t i = 0; i < n; i++)
			fprintf(f, "%" PRIx64 " %" PRIu64 " %" PRIu64 "\n", s[i].pc, s[i].insns, s[i].runs);
		if (fclose(f) == 0)
			rename(blocks_tmp, blocks_path);
	}
	free(s);
}

static void read_range(void)
{
	uint64_t start = 0, end = 0;
	FILE *f;

	if (!range_path)
		return;
	f = fopen(range_path, "r");
	if (f) {
		if (fscanf(f, "%" SCNx64 " %" SCNx64, &start, &end) != 2)
			start = end = 0;
		fclose(f);
	}
	__atomic_store_n(&range_start, start, __ATOMIC_RELAXED);
	__atomic_store_n(&range_end, end, __ATOMIC_RELAXED);
}

static void publish(void)
{
	/* A 64-bit aligned load is atomic on the hosts QEMU runs this on. */
	uint64_t n = __atomic_load_n(&executed, __ATOMIC_RELAXED);
	uint64_t b = __atomic_load_n(&blocks, __ATOMIC_RELAXED);
	uint64_t rn = __atomic_load_n(&range_executed, __ATOMIC_RELAXED);
	uint64_t rb = __atomic_load_n(&range_blocks, __ATOMIC_RELAXED);
	uint64_t tr = __atomic_load_n(&translations, __ATOMIC_RELAXED);
	uint64_t cpu_us = 0;
	struct rusage ru;
	FILE *f;

	if (getrusage(RUSAGE_SELF, &ru) == 0)
		cpu_us = (uint64_t)ru.ru_utime.tv_sec * 1000000 + (uint64_t)ru.ru_utime.tv_usec +
			 (uint64_t)ru.ru_stime.tv_sec * 1000000 + (uint64_t)ru.ru_stime.tv_usec;
	f = fopen(tmp_path, "w");
	if (!f)
		return;
	fprintf(f, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
		n, b, rn, rb, tr, cpu_us);
	if (fclose(f) == 0)
		rename(tmp_path, out_path);
}

static void *write_loop(void *arg)
{
	struct timespec ts = { .tv_sec = every_ms / 1000, .tv_nsec = (every_ms % 1000) * 1000000L };

	(void)arg;
	while (!stopping) {
		read_range();
		publish();
		if (access(blocks_req, F_OK) == 0) {
			publish_blocks();
			unlink(blocks_req);
		}
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void on_exit_cb(qemu_plugin_id_t id, void *userdata)
{
	(void)id;
	(void)userdata;
	stopping = true;
	pthread_join(writer, NULL);
	publish();
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const struct qemu_info_t *info, int argc, char **argv)
{
	(void)info;
	for (int i = 0; i < argc; i++) {
		if (strncmp(argv[i], "out=", 4) == 0) {
			out_path = argv[i] + 4;
		} else if (strncmp(argv[i], "range=", 6) == 0) {
			range_path = argv[i] + 6;
		} else if (strncmp(argv[i], "every=", 6) == 0) {
			every_ms = (unsigned int)strtoul(argv[i] + 6, NULL, 10);
		} else if (strcmp(argv[i], "kernel=1") == 0) {
			kernel_blocks = true;
		} else if (strcmp(argv[i], "kernel=0") == 0) {
			kernel_blocks = false;
		} else {
			fprintf(stderr, "insn_count: unknown argument '%s'\n", argv[i]);
			return -1;
		}
	}
	if (!out_path || every_ms == 0) {
		fprintf(stderr, "insn_count: needs out=PATH (and every=MS > 0)\n");
		return -1;
	}
	if (asprintf(&tmp_path, "%s.tmp", out_path) < 0 ||
	    asprintf(&blocks_path, "%s.blocks", out_path) < 0 ||
	    asprintf(&blocks_tmp, "%s.blocks.tmp", out_path) < 0 ||
	    asprintf(&blocks_req, "%s.blocks.req", out_path) < 0)
		return -1;
	qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
	qemu_plugin_register_atexit_cb(id, on_exit_cb, NULL);
	errno = pthread_create(&writer, NULL, write_loop, NULL);
	if (errno) {
		perror("insn_count: writer thread");
		return -1;
	}
	return 0;
}
