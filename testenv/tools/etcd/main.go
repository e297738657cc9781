// Command etcd is the etcd server used by the integration tests, built
// from the module proxy because Debian's etcd is too old for kube-apiserver.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
