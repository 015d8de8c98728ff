// An extender that decides nothing, in Go with its standard library alone: the floor under
// any extender (benchmarks/real_scheduler.py, run (d)). /filter passes every node it is
// sent; /bind posts the pod's Binding with a fixed chips annotation and predicate-time, as
// benchmarks/floor_extender.py does. Go's server speaks HTTP/2 to kube-scheduler over TLS, so
// every call shares one connection; its client posts the Bindings over HTTP/2 too. What this
// run costs beyond kube-scheduler without extenders is what calling any extender costs
// kube-scheduler and the API server on this machine.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"time"
)

const chips = "Ascend910-0,Ascend910-1" // a 2-chip pod's annotation, the sizes' mean

type filterArgs struct {
	NodeNames []string
}

type filterResult struct {
	NodeNames []string
	Error     string
}

type bindingArgs struct {
	PodName      string
	PodNamespace string
	PodUID       string
	Node         string
}

type bindingResult struct {
	Error string
}

func certPool(file string) *x509.CertPool {
	pem, err := os.ReadFile(file)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		log.Fatalf("%s: no certificate", file)
	}
	return pool
}

func answer(w http.ResponseWriter, value any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(value); err != nil {
		log.Print(err)
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "the verbs, over TLS with a certificate")
	probes := flag.String("probe-listen", "", "/readyz over plain HTTP")
	cert := flag.String("tls-cert-file", "", "")
	key := flag.String("tls-private-key-file", "", "")
	clientCA := flag.String("client-ca-file", "", "")
	api := flag.String("api", "", "the API server's URL")
	apiCA := flag.String("api-ca-file", "", "")
	apiCert := flag.String("api-cert-file", "", "")
	apiKey := flag.String("api-key-file", "", "")
	flag.Parse()

	pair, err := tls.LoadX509KeyPair(*apiCert, *apiKey)
	if err != nil {
		log.Fatal(err)
	}
	apiClient := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: certPool(*apiCA)},
			ForceAttemptHTTP2:   true,
			MaxIdleConnsPerHost: 64,
		},
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/filter", func(w http.ResponseWriter, r *http.Request) {
		var args filterArgs
		if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		answer(w, filterResult{NodeNames: args.NodeNames})
	})
	mux.HandleFunc("/bind", func(w http.ResponseWriter, r *http.Request) {
		var args bindingArgs
		if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		binding := map[string]any{
			"apiVersion": "v1",
			"kind":       "Binding",
			"metadata": map[string]any{
				"name":      args.PodName,
				"namespace": args.PodNamespace,
				"uid":       args.PodUID,
				"annotations": map[string]string{
					"huawei.com/Ascend910": chips,
					"predicate-time":       strconv.FormatInt(time.Now().UnixNano(), 10),
				},
			},
			"target": map[string]string{"apiVersion": "v1", "kind": "Node", "name": args.Node},
		}
		body, _ := json.Marshal(binding)
		url := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s/binding", *api, args.PodNamespace, args.PodName)
		resp, err := apiClient.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			answer(w, bindingResult{Error: err.Error()})
			return
		}
		defer resp.Body.Close()
		text, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
			answer(w, bindingResult{Error: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, text)})
			return
		}
		answer(w, bindingResult{})
	})

	if *probes != "" {
		go func() { log.Fatal(http.ListenAndServe(*probes, mux)) }()
	}
	server := &http.Server{Addr: *listen, Handler: mux}
	if *clientCA != "" {
		server.TLSConfig = &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: certPool(*clientCA)}
	}
	if *cert == "" {
		log.Fatal(server.ListenAndServe())
	}
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}
