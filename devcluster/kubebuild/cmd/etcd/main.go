// etcd's own main (go.etcd.io/etcd/v3/main.go), carried here because that module cannot be
// `go install`ed: its go.mod has replace directives.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
