module github.com/gpud/gpud

go 1.26.6

require (
	github.com/NVIDIA/go-nvml v0.13.4-1 // indirect
	github.com/containerd/containerd/v2 v2.4.2 // indirect
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/mattn/go-sqlite3 v1.14.53 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	github.com/pelletier/go-toml/v2 v2.4.3 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/urfave/cli/v2 v2.27.7 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	tags.cncf.io/container-device-interface v1.1.2 // indirect
)
