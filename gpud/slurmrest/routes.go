package slurmrest

import (
	"net/http"
	"strings"
)

// routeTable is every path and method of Slurm's API that gpud answers,
// with the data_parser versions that have it. Paths are written as
// Slurm's documents write them.
func routeTable() []*route {
	const (
		get  = http.MethodGet
		post = http.MethodPost
		del  = http.MethodDelete
	)
	rs := []*route{
		{method: get, plugin: "slurm", path: "ping/", empty: emptyPings, serve: ping},
		{method: get, plugin: "slurm", path: "diag/", empty: emptyStatistics, serve: diag},
		{method: get, plugin: "slurm", path: "reconfigure/", serve: reconfigure},
		{method: get, plugin: "slurm", path: "licenses/", empty: emptyLicenses, serve: licenses},
		{method: get, plugin: "slurm", path: "shares", empty: emptyShares, serve: shares},
		{method: get, plugin: "slurm", path: "conf", span: span{since: 45}, serve: conf},
		{method: post, plugin: "slurm", path: "job/submit", serve: submit},
		{method: post, plugin: "slurm", path: "job/allocate", serve: allocate},
		{method: get, plugin: "slurm", path: "jobs/", empty: emptyJobs, serve: getJobs},
		{method: del, plugin: "slurm", path: "jobs/", empty: emptyStatus, serve: deleteJobs},
		{method: get, plugin: "slurm", path: "jobs/state/", empty: emptyJobs, serve: getJobsState},
		{method: get, plugin: "slurm", path: "job/{job_id}", empty: emptyJobs, serve: getJob},
		{method: post, plugin: "slurm", path: "job/{job_id}", empty: emptyResults, serve: updateJob},
		{method: del, plugin: "slurm", path: "job/{job_id}", empty: emptyStatus, serve: signalJob},
		{method: get, plugin: "slurm", path: "job/{job_id}/requeue", span: span{since: 45}, empty: emptyStatus, serve: requeueJob},
		{method: post, plugin: "slurm", path: "jobs/requeue", span: span{since: 45}, empty: emptyStatus, serve: requeueJobs},
		{method: get, plugin: "slurm", path: "nodes/", empty: emptyNodes, serve: getNodes},
		{method: post, plugin: "slurm", path: "nodes/", serve: updateNode},
		{method: get, plugin: "slurm", path: "node/{node_name}", empty: emptyNodes, serve: getNodes},
		{method: post, plugin: "slurm", path: "node/{node_name}", serve: updateNode},
		{method: del, plugin: "slurm", path: "node/{node_name}", serve: deleteNode},
		{method: post, plugin: "slurm", path: "new/node/", span: span{since: 44}, serve: newNode},
		{method: get, plugin: "slurm", path: "partitions/", empty: emptyParts, serve: getPartitions},
		{method: post, plugin: "slurm", path: "partitions/", span: span{since: 45}, serve: configOnly("partitions")},
		{method: get, plugin: "slurm", path: "partition/{partition_name}", empty: emptyParts, serve: getPartitions},
		{method: del, plugin: "slurm", path: "partition/{partition_name}", span: span{since: 45}, serve: configOnly("partitions")},
		{method: get, plugin: "slurm", path: "reservations/", empty: emptyResv, serve: getReservations},
		{method: post, plugin: "slurm", path: "reservations/", span: span{since: 43}, empty: emptyResvMod, serve: changeReservation},
		{method: post, plugin: "slurm", path: "reservation", span: span{since: 43}, empty: emptyResvMod, serve: changeReservation},
		{method: get, plugin: "slurm", path: "reservation/{reservation_name}", empty: emptyResv, serve: getReservations},
		{method: del, plugin: "slurm", path: "reservation/{reservation_name}", serve: changeReservation},
		{method: get, plugin: "slurm", path: "resources/{job_id}", span: span{since: 44}, empty: emptyLayout, serve: getResources},

		{method: get, plugin: "slurmdb", path: "ping/", empty: emptyPings, serve: dbPing},
		{method: get, plugin: "slurmdb", path: "diag/", empty: emptyStatistics, serve: dbDiag},
		{method: get, plugin: "slurmdb", path: "jobs/", empty: emptyDBJobs, serve: dbJobs},
		{method: post, plugin: "slurmdb", path: "jobs/", span: span{since: 44}, empty: emptyResults, serve: dbModifyJob},
		{method: get, plugin: "slurmdb", path: "job/{job_id}", empty: emptyDBJobs, serve: dbJob},
		{method: post, plugin: "slurmdb", path: "job/{job_id}", span: span{since: 44}, empty: emptyResults, serve: dbModifyJob},
		{method: get, plugin: "slurmdb", path: "config", empty: emptyConfig, serve: dbConfig},
		{method: post, plugin: "slurmdb", path: "config", serve: configOnly("accounts, users and QOS")},
		{method: get, plugin: "slurmdb", path: "tres/", empty: emptyTRES, serve: dbTres},
		{method: post, plugin: "slurmdb", path: "tres/", serve: configOnly("trackable resources")},
		{method: get, plugin: "slurmdb", path: "qos/", empty: emptyQOS, serve: dbQOS},
		{method: post, plugin: "slurmdb", path: "qos/", serve: configOnly("QOS")},
		{method: get, plugin: "slurmdb", path: "qos/{qos}", empty: emptyQOS, serve: dbQOS},
		{method: del, plugin: "slurmdb", path: "qos/{qos}", empty: `"removed_qos":[]`, serve: configOnly("QOS")},
		{method: get, plugin: "slurmdb", path: "associations/", empty: emptyAssocs, serve: dbAssociations},
		{method: post, plugin: "slurmdb", path: "associations/", serve: configOnly("associations")},
		{method: del, plugin: "slurmdb", path: "associations/", empty: `"removed_associations":[]`, serve: configOnly("associations")},
		{method: get, plugin: "slurmdb", path: "association/", empty: emptyAssocs, serve: dbAssociations},
		{method: del, plugin: "slurmdb", path: "association/", empty: `"removed_associations":[]`, serve: configOnly("associations")},
		{method: get, plugin: "slurmdb", path: "instances/", empty: emptyInst, serve: dbInstances},
		{method: get, plugin: "slurmdb", path: "instance/", empty: emptyInst, serve: dbInstances},
		{method: get, plugin: "slurmdb", path: "users/", empty: emptyUsers, serve: dbUsers},
		{method: post, plugin: "slurmdb", path: "users/", serve: configOnly("users")},
		{method: get, plugin: "slurmdb", path: "user/{name}", empty: emptyUsers, serve: dbUsers},
		{method: del, plugin: "slurmdb", path: "user/{name}", serve: configOnly("users")},
		{method: post, plugin: "slurmdb", path: "users_association/", empty: `"added_users":""`, serve: configOnly("users")},
		{method: get, plugin: "slurmdb", path: "clusters/", empty: emptyClusters, serve: dbClusters},
		{method: post, plugin: "slurmdb", path: "clusters/", serve: configOnly("cluster name")},
		{method: get, plugin: "slurmdb", path: "cluster/{cluster_name}", empty: emptyClusters, serve: dbClusters},
		{method: del, plugin: "slurmdb", path: "cluster/{cluster_name}", empty: `"deleted_clusters":[]`, serve: configOnly("cluster name")},
		{method: get, plugin: "slurmdb", path: "wckeys/", empty: emptyWCKeys, serve: dbWCKeys},
		{method: post, plugin: "slurmdb", path: "wckeys/", serve: configOnly("wckeys")},
		{method: get, plugin: "slurmdb", path: "wckey/{id}", empty: emptyWCKeys, serve: dbWCKeys},
		{method: del, plugin: "slurmdb", path: "wckey/{id}", empty: `"deleted_wckeys":[]`, serve: configOnly("wckeys")},
		{method: get, plugin: "slurmdb", path: "accounts/", empty: emptyAccounts, serve: dbAccounts},
		{method: post, plugin: "slurmdb", path: "accounts/", serve: configOnly("accounts")},
		{method: get, plugin: "slurmdb", path: "account/{account_name}", empty: emptyAccounts, serve: dbAccounts},
		{method: del, plugin: "slurmdb", path: "account/{account_name}", empty: `"removed_accounts":[]`, serve: configOnly("accounts")},
		{method: post, plugin: "slurmdb", path: "accounts_association/", empty: `"added_accounts":""`, serve: configOnly("accounts")},
		{method: get, plugin: "slurmdb", path: "conf", span: span{since: 45}, empty: `"slurmdbd_conf":{}`, serve: dbConf},

		{method: post, plugin: "util", path: "hostnames", span: span{since: 44}, empty: `"hostnames":[]`, serve: hostnames},
		{method: post, plugin: "util", path: "hostlist", span: span{since: 44}, empty: `"hostlist":""`, serve: hostlistOfNames},
	}
	for _, r := range rs {
		r.segs = splitPath(r.path)
	}
	return rs
}

// docPath is the path as Slurm's document for version v writes it.
func (rt *route) docPath(v int) string {
	return "/" + rt.plugin + "/" + versionName(v) + "/" + rt.path
}

// dbModifyJob is POST slurmdb job/{id} and jobs/ (sacctmgr modify job):
// gpud's job history is written by the controller only.
func dbModifyJob(c *call) {
	c.fail(http.StatusUnprocessableEntity, errNotSupported, "gpud's job history is written by the controller only; change a job's comment or wckey before it ends with POST slurm job/{job_id}", "")
}

// dbConf is GET slurmdb conf (v0.0.45): gpud has no slurmdbd; its
// accounting lives in the controller.
func dbConf(c *call) {
	c.warn("gpud has no slurmdbd: accounting is kept by the controller in accounting.db (gpud.toml [accounting])", "")
	c.reply(func(w *jw) {
		w.key("slurmdbd_conf")
		w.obj(func() {
			w.key("DbdHost")
			w.str(c.h.o.Hostname)
		})
	})
}

// LargeBody says whether path takes a body as large as a batch script
// (job/submit, job/allocate, job/{id} with a new script); the server's
// edge allows those its largest body, others its small one.
func LargeBody(path string) bool {
	rest, ok := strings.CutPrefix(path, "/slurm/")
	if !ok {
		return false
	}
	_, rest, _ = strings.Cut(rest, "/")
	rest = strings.TrimSuffix(rest, "/")
	return rest == "job/submit" || rest == "job/allocate" || strings.HasPrefix(rest, "job/") && !strings.Contains(rest[4:], "/")
}

// Route is one method and path of Slurm's API as gpud serves it.
type Route struct {
	Method string
	// Path is the path in version V, as Slurm's document writes it
	// ("/slurm/v0.0.45/job/{job_id}").
	Path string
	V    int
}

// Routes lists every route gpud answers, in every version that has it
// (for docs/slurmrestd.md's table and the tests).
func Routes() []Route {
	var out []Route
	for _, v := range Versions {
		for _, rt := range routeTable() {
			if rt.has(v) {
				out = append(out, Route{Method: rt.method, Path: rt.docPath(v), V: v})
			}
		}
	}
	return out
}
