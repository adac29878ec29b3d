// etcd 3.6 server (what etcd's own main.go does: etcdmain.Main).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
