// kstatus reads Kubernetes objects (JSON, one per line) on stdin and prints, per object, the status that
// sigs.k8s.io/cli-utils/pkg/kstatus computes: the library Flux's health checks (and kubectl-style waiters) use.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 16<<20)
	out := json.NewEncoder(os.Stdout)
	for scanner.Scan() {
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(scanner.Bytes()); err != nil {
			fmt.Fprintln(os.Stderr, "bad object:", err)
			os.Exit(2)
		}
		result, err := status.Compute(obj)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kstatus:", err)
			os.Exit(1)
		}
		_ = out.Encode(map[string]string{"status": result.Status.String(), "message": result.Message})
	}
}
