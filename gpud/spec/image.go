package spec

import (
	"fmt"
	"strings"
)

// ImageHost is the image name of "the node's own root filesystem"
// (runtime.ImageHost; spec imports no runtime).
const ImageHost = "host"

// ParseImage turns an image as users write it into the OCI reference the
// nodes pull: gpud's and Docker's host/repo:tag (a first component without
// '.' or ':' is Docker Hub's), and enroot's and pyxis's forms:
//
//	[docker://][USER@][REGISTRY#]IMAGE[:TAG|@DIGEST]
//
// REGISTRY#IMAGE is REGISTRY/IMAGE; USER@ (enroot's choice of login) is
// dropped, since the registry credentials come from the user's own file on
// the node. "host" is the node's root filesystem. Forms that name no
// registry image (enroot's squashfs files, dockerd:// and podman://, which
// read a local daemon's store) are refused, saying what to do instead.
func ParseImage(s string) (string, error) {
	if s == "" || s == ImageHost {
		return s, nil
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return "", fmt.Errorf("image %q contains white space", s)
	}
	for _, p := range []string{"dockerd://", "podman://"} {
		if strings.HasPrefix(s, p) {
			return "", fmt.Errorf("image %q: %s reads a local daemon's images, which the nodes do not have; push the image to a registry and name it REGISTRY#IMAGE:TAG", s, p)
		}
	}
	if strings.HasSuffix(s, ".sqsh") || strings.HasSuffix(s, ".squashfs") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "./") {
		return "", fmt.Errorf("image %q looks like a file (an enroot squashfs image?); gpud runs OCI images from registries: push it (enroot export is not needed) and name it REGISTRY#IMAGE:TAG", s)
	}
	ref := strings.TrimPrefix(s, "docker://")
	if reg, img, ok := strings.Cut(ref, "#"); ok {
		if _, host, ok := strings.Cut(reg, "@"); ok {
			reg = host
		}
		if reg == "" || img == "" || strings.Contains(img, "#") || strings.Contains(reg, "/") {
			return "", fmt.Errorf("image %q is not REGISTRY#IMAGE[:TAG] (e.g. nvcr.io#nvidia/pytorch:24.05-py3)", s)
		}
		ref = reg + "/" + img
	}
	if ref == "" || strings.HasPrefix(ref, "/") || strings.HasSuffix(ref, "/") || strings.Contains(ref, "//") {
		return "", fmt.Errorf("image %q is not an image reference (REGISTRY#IMAGE:TAG, REGISTRY/IMAGE:TAG or IMAGE:TAG)", s)
	}
	return ref, nil
}

// ImageKey is the name an image is cached under on the nodes, for
// matching a job's image with a node's inventory: ParseImage's reference
// with Docker's defaults made explicit (the registry docker.io, its
// library/ namespace, the tag latest), as containerd stores it
// ("ubuntu" is docker.io/library/ubuntu:latest). "" for "", "host" and
// references ParseImage refuses.
func ImageKey(s string) string {
	ref, err := ParseImage(s)
	if err != nil || ref == "" || ref == ImageHost {
		return ""
	}
	name, digest, hasDigest := strings.Cut(ref, "@")
	host, rest, ok := strings.Cut(name, "/")
	if !ok || (!strings.ContainsAny(host, ".:") && host != "localhost") {
		host, rest = "docker.io", name
	}
	if host == "docker.io" && !strings.Contains(rest, "/") {
		rest = "library/" + rest
	}
	if hasDigest {
		return host + "/" + rest + "@" + digest
	}
	if i := strings.LastIndexByte(rest, ':'); i < 0 || strings.Contains(rest[i:], "/") {
		rest += ":latest"
	}
	return host + "/" + rest
}
