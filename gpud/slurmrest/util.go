package slurmrest

import (
	"fmt"
	"net/http"

	"github.com/gpud/gpud/gpud/hostlist"
)

func expandHostlist(s string) ([]string, error) { return hostlist.Expand(s) }

// hostnames is POST util hostnames: {"hostlist": "gpu[01-03]"} expanded.
func hostnames(c *call) {
	body, ok := c.body()
	if !ok {
		return
	}
	var names []string
	for _, k := range sortedKeys(body) {
		if k != "hostlist" {
			c.warn(fmt.Sprintf("%s is not a member of this request (hostlist); ignored", clipText(k)), k)
			continue
		}
		l, err := asList(body[k])
		if err != nil {
			c.fail(http.StatusBadRequest, errRESTInvalidQuery, "hostlist: "+err.Error(), k)
			return
		}
		for _, s := range l {
			n, err := expandHostlist(s)
			if err != nil {
				c.fail(http.StatusBadRequest, errRESTInvalidQuery, fmt.Sprintf("hostlist %q: %v", clipText(s), err), k)
				return
			}
			names = append(names, n...)
		}
	}
	c.reply(func(w *jw) {
		w.key("hostnames")
		w.strs(names)
	})
}

// hostlistOfNames is POST util hostlist: {"hostnames": [...]} compressed.
func hostlistOfNames(c *call) {
	body, ok := c.body()
	if !ok {
		return
	}
	var names []string
	for _, k := range sortedKeys(body) {
		if k != "hostnames" {
			c.warn(fmt.Sprintf("%s is not a member of this request (hostnames); ignored", clipText(k)), k)
			continue
		}
		l, err := asList(body[k])
		if err != nil {
			c.fail(http.StatusBadRequest, errRESTInvalidQuery, "hostnames: "+err.Error(), k)
			return
		}
		for _, s := range l {
			if !hostlist.ValidName(s) {
				c.fail(http.StatusBadRequest, errRESTInvalidQuery, fmt.Sprintf("hostnames: %q is not a host name", clipText(s)), k)
				return
			}
		}
		names = append(names, l...)
	}
	c.reply(func(w *jw) {
		w.key("hostlist")
		w.str(hostlist.Compress(names))
	})
}
