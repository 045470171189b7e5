package main

/*
#cgo pkg-config: pmix
#include <pmix.h>
#include <pmix_server.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(PMIX_RANK_WILDCARD == 0xfffffffe, "gpud-pmix: PMIX_RANK_WILDCARD is not what main.go says");

// The host side of the server's upcalls: Go functions (main.go).
extern void gpudFence(pmix_proc_t *procs, size_t nprocs, char *data, size_t ndata, pmix_modex_cbfunc_t cb, void *cbdata);
extern void gpudAbort(int status, char *msg);

static pmix_status_t gpud_fence_nb(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo,
                                   char *data, size_t ndata, pmix_modex_cbfunc_t cbfunc, void *cbdata) {
	gpudFence((pmix_proc_t *)procs, nprocs, data, ndata, cbfunc, cbdata);
	return PMIX_SUCCESS;
}

static pmix_status_t gpud_abort(const pmix_proc_t *proc, void *server_object, int status, const char msg[],
                                pmix_proc_t procs[], size_t nprocs, pmix_op_cbfunc_t cbfunc, void *cbdata) {
	gpudAbort(status, (char *)msg);
	if (cbfunc != NULL) {
		cbfunc(PMIX_SUCCESS, cbdata);
	}
	return PMIX_SUCCESS;
}

// Direct modex is not served: gpud's fences collect every node's data
// (Open MPI fences with PMIX_COLLECT_DATA at MPI_Init).
static pmix_status_t gpud_dmodex(const pmix_proc_t *proc, const pmix_info_t info[], size_t ninfo,
                                 pmix_modex_cbfunc_t cbfunc, void *cbdata) {
	return PMIX_ERR_NOT_SUPPORTED;
}

static pmix_server_module_t gpud_module = {
	.abort = gpud_abort,
	.fence_nb = gpud_fence_nb,
	.direct_modex = gpud_dmodex,
};

static void gpud_release(void *cbdata) { free(cbdata); }

// gpud_fenced answers a fence with the data of every node (malloc'd; the
// server frees it through gpud_release when done).
static void gpud_fenced(pmix_modex_cbfunc_t cb, void *cbdata, pmix_status_t st, char *data, size_t ndata) {
	cb(st, data, ndata, cbdata, gpud_release, data);
}

// Waiting for an operation's callback.
typedef struct {
	pthread_mutex_t m;
	pthread_cond_t c;
	int done;
	pmix_status_t st;
} gpud_waiter;

static void gpud_op_cb(pmix_status_t st, void *cbdata) {
	gpud_waiter *w = cbdata;
	pthread_mutex_lock(&w->m);
	w->st = st;
	w->done = 1;
	pthread_cond_signal(&w->c);
	pthread_mutex_unlock(&w->m);
}

static pmix_status_t gpud_wait(gpud_waiter *w, pmix_status_t rc) {
	if (rc == PMIX_OPERATION_SUCCEEDED) {
		return PMIX_SUCCESS;
	}
	if (rc != PMIX_SUCCESS) {
		return rc;
	}
	pthread_mutex_lock(&w->m);
	while (!w->done) {
		pthread_cond_wait(&w->c, &w->m);
	}
	pthread_mutex_unlock(&w->m);
	return w->st;
}

static gpud_waiter *gpud_new_waiter(void) {
	gpud_waiter *w = calloc(1, sizeof(*w));
	pthread_mutex_init(&w->m, NULL);
	pthread_cond_init(&w->c, NULL);
	return w;
}

static void gpud_free_waiter(gpud_waiter *w) {
	pthread_mutex_destroy(&w->m);
	pthread_cond_destroy(&w->c);
	free(w);
}

static pmix_status_t gpud_server_init(char *tmpdir, uint32_t uid) {
	pmix_info_t info[4];
	bool no = false;
	PMIX_INFO_LOAD(&info[0], PMIX_SERVER_TMPDIR, tmpdir, PMIX_STRING);
	PMIX_INFO_LOAD(&info[1], PMIX_SYSTEM_TMPDIR, tmpdir, PMIX_STRING);
	PMIX_INFO_LOAD(&info[2], PMIX_USERID, &uid, PMIX_UINT32);
	PMIX_INFO_LOAD(&info[3], PMIX_SERVER_TOOL_SUPPORT, &no, PMIX_BOOL);
	pmix_status_t rc = PMIx_server_init(&gpud_module, info, 4);
	for (int i = 0; i < 4; i++) {
		PMIX_INFO_DESTRUCT(&info[i]);
	}
	return rc;
}

// Building the namespace's information array.
static pmix_info_t *gpud_infos(size_t n) {
	pmix_info_t *info;
	PMIX_INFO_CREATE(info, n);
	return info;
}
static void gpud_free_infos(pmix_info_t *info, size_t n) { PMIX_INFO_FREE(info, n); }
static void gpud_info_string(pmix_info_t *info, size_t i, char *key, char *val) {
	PMIX_INFO_LOAD(&info[i], key, val, PMIX_STRING);
}
static void gpud_info_uint32(pmix_info_t *info, size_t i, char *key, uint32_t val) {
	PMIX_INFO_LOAD(&info[i], key, &val, PMIX_UINT32);
}
static void gpud_info_uint16(pmix_info_t *info, size_t i, char *key, uint16_t val) {
	PMIX_INFO_LOAD(&info[i], key, &val, PMIX_UINT16);
}
static void gpud_info_int(pmix_info_t *info, size_t i, char *key, int val) {
	PMIX_INFO_LOAD(&info[i], key, &val, PMIX_INT);
}
static void gpud_info_rank(pmix_info_t *info, size_t i, char *key, uint32_t val) {
	pmix_rank_t r = val;
	PMIX_INFO_LOAD(&info[i], key, &r, PMIX_PROC_RANK);
}
static void gpud_info_bool(pmix_info_t *info, size_t i, char *key, int val) {
	bool b = val != 0;
	PMIX_INFO_LOAD(&info[i], key, &b, PMIX_BOOL);
}
// gpud_info_array makes info[i] key's data array of the n infos of arr,
// which it takes over.
static void gpud_info_array(pmix_info_t *info, size_t i, char *key, pmix_info_t *arr, size_t n) {
	pmix_data_array_t darray;
	darray.type = PMIX_INFO;
	darray.size = n;
	darray.array = arr;
	PMIX_INFO_LOAD(&info[i], key, &darray, PMIX_DATA_ARRAY);
	PMIX_INFO_FREE(arr, n);
}

static pmix_status_t gpud_register_nspace(char *nspace, int nlocal, pmix_info_t *info, size_t ninfo) {
	gpud_waiter *w = gpud_new_waiter();
	pmix_status_t rc = gpud_wait(w, PMIx_server_register_nspace(nspace, nlocal, info, ninfo, gpud_op_cb, w));
	gpud_free_waiter(w);
	return rc;
}

static pmix_status_t gpud_register_client(char *nspace, uint32_t rank, uint32_t uid, uint32_t gid) {
	pmix_proc_t proc;
	PMIX_PROC_LOAD(&proc, nspace, rank);
	gpud_waiter *w = gpud_new_waiter();
	pmix_status_t rc = gpud_wait(w, PMIx_server_register_client(&proc, uid, gid, NULL, gpud_op_cb, w));
	gpud_free_waiter(w);
	return rc;
}

static void gpud_deregister_nspace(char *nspace) {
	gpud_waiter *w = gpud_new_waiter();
	PMIx_server_deregister_nspace(nspace, gpud_op_cb, w);
	gpud_wait(w, PMIX_SUCCESS);
	gpud_free_waiter(w);
}

// gpud_setup_fork returns rank's client environment (a NULL-terminated
// array the caller frees with gpud_free_env).
static char **gpud_setup_fork(char *nspace, uint32_t rank, pmix_status_t *rc) {
	pmix_proc_t proc;
	PMIX_PROC_LOAD(&proc, nspace, rank);
	char **env = NULL;
	*rc = PMIx_server_setup_fork(&proc, &env);
	return env;
}

static void gpud_free_env(char **env) {
	if (env == NULL) {
		return;
	}
	for (char **e = env; *e != NULL; e++) {
		free(*e);
	}
	free(env);
}

static char *gpud_env_at(char **env, int i) { return env[i]; }
static uint32_t gpud_proc_rank(const pmix_proc_t *procs, size_t i) { return procs[i].rank; }
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"
)

// status turns a PMIx status into an error naming what failed.
func status(what string, rc C.pmix_status_t) error {
	if rc == C.PMIX_SUCCESS {
		return nil
	}
	return fmt.Errorf("%s: %s (%d)", what, C.GoString(C.PMIx_Error_string(rc)), int(rc))
}

// serverInit starts the PMIx server with its rendezvous files in tmpdir.
func serverInit(tmpdir string, uid int) error {
	ct := C.CString(tmpdir)
	defer C.free(unsafe.Pointer(ct))
	return status("PMIx_server_init", C.gpud_server_init(ct, C.uint32_t(uid)))
}

func serverFinalize() { C.PMIx_server_finalize() }

// generate runs PMIx_generate_regex or PMIx_generate_ppn.
func generate(ppn bool, input string) (string, error) {
	ci := C.CString(input)
	defer C.free(unsafe.Pointer(ci))
	var out *C.char
	var rc C.pmix_status_t
	if ppn {
		rc = C.PMIx_generate_ppn(ci, &out)
	} else {
		rc = C.PMIx_generate_regex(ci, &out)
	}
	if err := status("PMIx_generate", rc); err != nil {
		return "", err
	}
	defer C.free(unsafe.Pointer(out))
	return C.GoString(out), nil
}

// kv is one entry of the namespace's information.
type kv struct {
	key string
	val any // string, uint32, uint16, int, bool, rank, or []kv (a PMIX_PROC_DATA array)
}

// rank marks a uint32 as a PMIx rank.
type rank uint32

// infos builds a pmix_info_t array of kvs (the caller frees it).
func infos(kvs []kv) (*C.pmix_info_t, C.size_t) {
	n := C.size_t(len(kvs))
	info := C.gpud_infos(n)
	for i, e := range kvs {
		ck := C.CString(e.key)
		ci := C.size_t(i)
		switch v := e.val.(type) {
		case string:
			cv := C.CString(v)
			C.gpud_info_string(info, ci, ck, cv)
			C.free(unsafe.Pointer(cv))
		case uint32:
			C.gpud_info_uint32(info, ci, ck, C.uint32_t(v))
		case uint16:
			C.gpud_info_uint16(info, ci, ck, C.uint16_t(v))
		case int:
			C.gpud_info_int(info, ci, ck, C.int(v))
		case rank:
			C.gpud_info_rank(info, ci, ck, C.uint32_t(v))
		case bool:
			b := 0
			if v {
				b = 1
			}
			C.gpud_info_bool(info, ci, ck, C.int(b))
		case []kv:
			arr, an := infos(v)
			C.gpud_info_array(info, ci, ck, arr, an)
		}
		C.free(unsafe.Pointer(ck))
	}
	return info, n
}

// registerNspace registers the step's namespace with nlocal local tasks.
func registerNspace(nspace string, nlocal int, kvs []kv) error {
	cn := C.CString(nspace)
	defer C.free(unsafe.Pointer(cn))
	info, n := infos(kvs)
	defer C.gpud_free_infos(info, n)
	return status("PMIx_server_register_nspace", C.gpud_register_nspace(cn, C.int(nlocal), info, n))
}

func deregisterNspace(nspace string) {
	cn := C.CString(nspace)
	defer C.free(unsafe.Pointer(cn))
	C.gpud_deregister_nspace(cn)
}

// registerClient admits a local task (as the job's user) to the server.
func registerClient(nspace string, r, uid, gid int) error {
	cn := C.CString(nspace)
	defer C.free(unsafe.Pointer(cn))
	return status(fmt.Sprintf("PMIx_server_register_client of rank %d", r), C.gpud_register_client(cn, C.uint32_t(r), C.uint32_t(uid), C.uint32_t(gid)))
}

// setupFork is a local task's client environment.
func setupFork(nspace string, r int) ([]string, error) {
	cn := C.CString(nspace)
	defer C.free(unsafe.Pointer(cn))
	var rc C.pmix_status_t
	env := C.gpud_setup_fork(cn, C.uint32_t(r), &rc)
	defer C.gpud_free_env(env)
	if err := status(fmt.Sprintf("PMIx_server_setup_fork of rank %d", r), rc); err != nil {
		return nil, err
	}
	var out []string
	for i := 0; env != nil; i++ {
		e := C.gpud_env_at(env, C.int(i))
		if e == nil {
			break
		}
		out = append(out, C.GoString(e))
	}
	if len(out) == 0 {
		return nil, errors.New("PMIx_server_setup_fork gave no environment")
	}
	return out, nil
}

// A fence the server asked for: its callback, to answer later.
type fenceCall struct {
	cb     C.pmix_modex_cbfunc_t
	cbdata unsafe.Pointer
}

// answer completes the fence with data (every node's contribution,
// concatenated), or fails it.
func (f fenceCall) answer(data []byte, err error) {
	if err != nil {
		C.gpud_fenced(f.cb, f.cbdata, C.PMIX_ERROR, nil, 0)
		return
	}
	var buf *C.char
	if len(data) > 0 {
		buf = (*C.char)(C.CBytes(data))
	}
	C.gpud_fenced(f.cb, f.cbdata, C.PMIX_SUCCESS, buf, C.size_t(len(data)))
}

//export gpudFence
func gpudFence(procs *C.pmix_proc_t, nprocs C.size_t, data *C.char, ndata C.size_t, cb C.pmix_modex_cbfunc_t, cbdata unsafe.Pointer) {
	ranks := make([]uint32, int(nprocs))
	for i := range ranks {
		ranks[i] = uint32(C.gpud_proc_rank(procs, C.size_t(i)))
	}
	var b []byte
	if ndata > 0 {
		b = C.GoBytes(unsafe.Pointer(data), C.int(ndata))
	}
	theHelper.fence(ranks, b, fenceCall{cb: cb, cbdata: cbdata})
}

//export gpudAbort
func gpudAbort(st C.int, msg *C.char) {
	m := ""
	if msg != nil {
		m = strings.TrimSpace(C.GoString(msg))
	}
	theHelper.abort(int(st), m)
}
