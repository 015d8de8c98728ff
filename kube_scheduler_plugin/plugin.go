/*
Copyright 2026 The ascend-npu-k8s Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// The AscendNPU plugin: kube-scheduler's framework calls it in the scheduling cycle and it
// asks the scheduler service, which decides; it decides nothing itself. Two calls a pod, both
// in the cycle, both on one kept-alive connection:
//
//   - PreFilter posts the pod to <urlPrefix>/place: the service's filter over the NPU nodes it
//     knows, sampled as kube-scheduler samples its own (numFeasibleNodesToFind with the
//     percentageOfNodesToScore the args repeat, from where the last call stopped), answered
//     with the nodes of its best score only (as --filter-answers best does for the
//     extender). Those become the PreFilterResult, so kube-scheduler's own filters and scores
//     run on them alone and choose among them, as they choose among our ties behind the
//     extender.
//   - Reserve posts the pod and the node kube-scheduler chose to <urlPrefix>/reserve: the
//     service chooses the chips there and holds them, and answers the annotations.
//
// A goroutine polls <urlPrefix>/freed: when the service freed a place kube-scheduler sees no
// event for, the pods PreFilter refused go back to the active queue (below).
//
// PostFilter asks <urlPrefix>/waits before kube-scheduler's own preemption (below). Bind posts
// the Binding with those annotations itself, through kube-scheduler's own client
// (the API server copies a Binding's annotations onto the pod: pkg/registry/core/pod/storage
// assignPod), as the in-tree DefaultBinder posts it without them
// (pkg/scheduler/framework/plugins/defaultbinder). Unreserve, after a Reserve whose pod did
// not bind, posts <urlPrefix>/unreserve so that the chips come back at once.
//
// Against the extender (pkg/scheduler/extender.go): no list of node names goes over the wire,
// no Python process posts the Binding, and the client is ours, so its idle connections are
// not capped at Go's default two (the extender's makeTransport), which under a backlog made
// kube-scheduler open a TLS connection for about one pod in three (docs/results.md).
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// Name is the plugin's name in the profile (KubeSchedulerConfiguration plugins and pluginConfig).
const Name = "AscendNPU"

const stateKey fwk.StateKey = Name

// predicateTime is the annotation the device plugin orders a node's pending pods by
// (contract/annotations.py PREDICATE_TIME).
const predicateTime = "predicate-time"

// answerLimit bounds what is read of an answer: a /place answer names at most every node.
const answerLimit = 32 << 20

// freedPeriod is how often the plugin asks the service whether a place was freed: a refused
// pod waits at most this long after (and its backoff, below), where kube-scheduler alone would
// wait for its next event or its 5-minute flush of unschedulable pods.
const freedPeriod = 2 * time.Second

// The backoff of a pod refused again and again, as kube-scheduler's own (1 s doubling to 10 s:
// pkg/scheduler/backend/queue/scheduling_queue.go DefaultPodInitialBackoffDuration and
// DefaultPodMaxBackoffDuration). Activate skips that backoff (it moves a pod from the backoff
// queue too), and in a busy cluster the count moves at almost every poll: without one, every
// refused pod would be tried every 2 s, each a /place over every NPU node.
const (
	initialBackoff = time.Second
	maxBackoff     = 10 * time.Second
)

// forgetAfter: a refusal this old is dropped (its pod gone, or bound by another path). Its pod,
// if still waiting, is tried by kube-scheduler's flush of unschedulable pods by then, and a new
// refusal is recorded anew.
const forgetAfter = 5 * time.Minute

// Args are the plugin's pluginConfig args.
type Args struct {
	// URLPrefix is the service's verbs' URL, e.g. https://ascend-npu-scheduler.kube-system.svc:8888.
	URLPrefix string `json:"urlPrefix"`
	// CAFile, CertFile and KeyFile: the CA the service's certificate is checked against and
	// kube-scheduler's client certificate (the CN the service lets call these verbs).
	CAFile   string `json:"caFile"`
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
	// HTTPTimeout bounds each call (default 5s, the extender's httpTimeout in the chart).
	HTTPTimeout metav1.Duration `json:"httpTimeout"`
	// ManagedResources: a pod asking none of them is not the plugin's (Skip).
	ManagedResources []string `json:"managedResources"`
	// PercentageOfNodesToScore repeats the profile's (a plugin cannot read it): of the NPU
	// nodes, how many /place asks before it answers the best (0: kube-scheduler's adaptive
	// default, 50 - nodes/125 %, at least 5 % and 100 nodes; 100: every node).
	PercentageOfNodesToScore int32 `json:"percentageOfNodesToScore"`
}

// AscendNPU is the plugin.
type AscendNPU struct {
	handle     fwk.Handle
	client     *http.Client
	prefix     string
	managed    []v1.ResourceName
	percentage int32
	nodes      sync.Map // node name → *sync.Mutex (writing)
	refused    sync.Map // pod UID → refusal: the pods PreFilter found no node for
	now        func() time.Time
}

// refusal is a pod PreFilter found no node for: the service's count of places freed as its
// decision began, when, how many times in a row, and whether it was activated since.
type refusal struct {
	pod       *v1.Pod
	freed     int64
	at        time.Time
	attempts  int
	activated bool
}

// due is when the refused pod may be activated: its backoff after the refusal.
func (r refusal) due() time.Time {
	backoff := maxBackoff
	if r.attempts <= 4 { // 1, 2, 4, 8 s, then 10
		backoff = initialBackoff << (r.attempts - 1)
	}
	return r.at.Add(backoff)
}

var (
	_ fwk.PreFilterPlugin  = &AscendNPU{}
	_ fwk.PostFilterPlugin = &AscendNPU{}
	_ fwk.ReservePlugin    = &AscendNPU{}
	_ fwk.BindPlugin       = &AscendNPU{}
)

// New builds the plugin from its args (runtime.Unknown for an out-of-tree plugin).
func New(ctx context.Context, configuration runtime.Object, handle fwk.Handle) (fwk.Plugin, error) {
	var args Args
	if configuration != nil {
		if err := frameworkruntime.DecodeInto(configuration, &args); err != nil {
			return nil, fmt.Errorf("%s args: %w", Name, err)
		}
	}
	if args.URLPrefix == "" {
		return nil, fmt.Errorf("%s args: urlPrefix is required", Name)
	}
	if len(args.ManagedResources) == 0 {
		return nil, fmt.Errorf("%s args: managedResources is required", Name)
	}
	if args.PercentageOfNodesToScore < 0 || args.PercentageOfNodesToScore > 100 {
		return nil, fmt.Errorf("%s args: percentageOfNodesToScore %d is not within 0..100", Name, args.PercentageOfNodesToScore)
	}
	timeout := args.HTTPTimeout.Duration
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	transport, err := newTransport(args)
	if err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	managed := make([]v1.ResourceName, 0, len(args.ManagedResources))
	for _, name := range args.ManagedResources {
		managed = append(managed, v1.ResourceName(name))
	}
	plugin := &AscendNPU{
		handle:     handle,
		client:     &http.Client{Transport: transport, Timeout: timeout},
		prefix:     strings.TrimRight(args.URLPrefix, "/"),
		managed:    managed,
		percentage: args.PercentageOfNodesToScore,
		now:        time.Now,
	}
	go plugin.watchFreed(ctx, freedPeriod)
	return plugin, nil
}

// newTransport: TLS with the client certificate when the prefix is https (as the extender's
// tlsConfig), and enough idle connections that none is closed between two calls of a cycle.
func newTransport(args Args) (*http.Transport, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 8
	if !strings.HasPrefix(args.URLPrefix, "https://") {
		return transport, nil
	}
	config := &tls.Config{MinVersion: tls.VersionTLS12}
	if args.CAFile != "" {
		pem, err := os.ReadFile(args.CAFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("caFile %s holds no certificate", args.CAFile)
		}
		config.RootCAs = pool
	}
	if args.CertFile != "" || args.KeyFile != "" {
		pair, err := tls.LoadX509KeyPair(args.CertFile, args.KeyFile)
		if err != nil {
			return nil, err
		}
		config.Certificates = []tls.Certificate{pair}
	}
	transport.TLSClientConfig = config
	return transport, nil
}

// Name is the plugin's name.
func (pl *AscendNPU) Name() string { return Name }

// decision is what the cycle learned of the service: the chips' annotations once reserved.
type decision struct {
	annotations map[string]string
}

// Clone copies: Reserve fills the annotations in after PreFilter (preemption's dry runs clone
// the state before).
func (d *decision) Clone() fwk.StateData { return &decision{annotations: d.annotations} }

func (pl *AscendNPU) asksNPU(pod *v1.Pod) bool {
	for i := range pod.Spec.Containers {
		for _, name := range pl.managed {
			if quantity, ok := pod.Spec.Containers[i].Resources.Limits[name]; ok && !quantity.IsZero() {
				return true
			}
		}
	}
	return false
}

type placeAnswer struct {
	NodeNames    []string `json:"NodeNames"`
	Reason       string   `json:"Reason"`
	Unresolvable bool     `json:"Unresolvable"`
	Freed        int64    `json:"Freed"`
}

// PreFilter asks the service for the nodes of its best score. A pod asking no NPU is not
// ours (Skip: kube-scheduler's own plugins place it).
func (pl *AscendNPU) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if !pl.asksNPU(pod) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	var answer placeAnswer
	body := map[string]any{"Pod": pod}
	if pl.percentage != 0 {
		body["PercentageOfNodesToScore"] = pl.percentage
	}
	if err := pl.post(ctx, "place", body, &answer); err != nil {
		return nil, fwk.AsStatus(err)
	}
	if len(answer.NodeNames) == 0 {
		code := fwk.Unschedulable
		if answer.Unresolvable {
			code = fwk.UnschedulableAndUnresolvable
		}
		attempts := 1
		if earlier, ok := pl.refused.Load(pod.UID); ok {
			attempts = earlier.(refusal).attempts + 1
		}
		pl.refused.Store(pod.UID, refusal{pod: pod, freed: answer.Freed, at: pl.now(), attempts: attempts})
		return nil, fwk.NewStatus(code, answer.Reason)
	}
	pl.refused.Delete(pod.UID)
	state.Write(stateKey, &decision{})
	return &fwk.PreFilterResult{NodeNames: sets.New(answer.NodeNames...)}, nil
}

type freedAnswer struct {
	Freed int64 `json:"Freed"`
}

// watchFreed asks the service every period how many times it freed a place that
// kube-scheduler sees no event for (a NodeD report cleared, a node's DeviceInfo fresh again, a
// reservation expired) and activates the pods PreFilter refused at another count: freed since
// (or counted by another replica), each once its backoff has passed. A pod refused while a
// place was being freed carries the count from before, so it is caught by a later poll. The
// plugin names no EnqueueExtensions, so any Pod or Node event requeues them as well; without
// one they would wait for the flush of unschedulable pods, 5 minutes
// (pkg/scheduler/backend/queue/scheduling_queue.go, podMaxInUnschedulablePodsDuration).
func (pl *AscendNPU) watchFreed(ctx context.Context, period time.Duration) {
	logger := klog.FromContext(ctx).WithValues("plugin", Name)
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		var answer freedAnswer
		if err := pl.post(ctx, "freed", map[string]any{}, &answer); err != nil {
			logger.V(4).Info("asking what the service freed", "err", err)
			continue
		}
		pl.activateRefused(logger, answer.Freed)
	}
}

// activateRefused moves the pods refused at another count than freed, once their backoff has
// passed, to the active queue (kube-scheduler's Activate takes only those still in its
// unschedulable pods or backoff queue; a pod deleted since is ignored). Each refusal activates
// its pod once; the next refusal of the pod counts one more attempt.
func (pl *AscendNPU) activateRefused(logger klog.Logger, freed int64) {
	now := pl.now()
	pods := map[string]*v1.Pod{}
	pl.refused.Range(func(uid, value any) bool {
		// Compare-and-swap: a refusal PreFilter records meanwhile stands, for the next poll.
		refused := value.(refusal)
		switch {
		case now.Sub(refused.at) > forgetAfter:
			pl.refused.CompareAndDelete(uid, value)
		case !refused.activated && refused.freed != freed && !now.Before(refused.due()):
			activated := refused
			activated.activated = true
			if pl.refused.CompareAndSwap(uid, value, activated) {
				pods[refused.pod.Namespace+"/"+refused.pod.Name] = refused.pod
			}
		}
		return true
	})
	if len(pods) > 0 {
		logger.V(2).Info("places freed: the refused pods are tried again", "pods", len(pods))
		pl.handle.Activate(logger, pods)
	}
}

// PreFilterExtensions: none (the service's answer does not change with the nominated pods
// kube-scheduler adds or removes in its dry runs).
func (pl *AscendNPU) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

type waitsAnswer struct {
	Reason string `json:"Reason"`
}

// PostFilter, before kube-scheduler's DefaultPreemption: a pod an earlier preemption
// nominated to a node evicts nothing more while the service says it waits for that node
// (<urlPrefix>/waits, the grace the extender's /preempt gives). kube-scheduler lets it preempt
// again once its victims are gone from its cache (PodEligibleToPreemptOthers,
// pkg/scheduler/framework/plugins/defaultpreemption), which may be before the service sees
// their chips free; its dry run then finds no victim on the nominated node and takes one
// elsewhere (seen on the real kube-scheduler: tests/real/test_preemption.py).
// UnschedulableAndUnresolvable ends the PostFilter plugins (framework RunPostFilterPlugins);
// Unschedulable lets DefaultPreemption run.
func (pl *AscendNPU) PostFilter(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if pod.Status.NominatedNodeName == "" || !pl.asksNPU(pod) {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	var answer waitsAnswer
	if err := pl.post(ctx, "waits", map[string]any{"Pod": pod}, &answer); err != nil {
		return nil, fwk.AsStatus(err)
	}
	if answer.Reason != "" {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, answer.Reason)
	}
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

type reserveAnswer struct {
	Annotations map[string]string `json:"Annotations"`
	Error       string            `json:"Error"`
}

// Reserve has the service choose and hold the chips on the node kube-scheduler chose.
func (pl *AscendNPU) Reserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	held, err := read(state)
	if err != nil {
		return nil // not ours: PreFilter skipped it
	}
	var answer reserveAnswer
	if err := pl.post(ctx, "reserve", map[string]any{"Pod": pod, "Node": nodeName}, &answer); err != nil {
		return fwk.AsStatus(err)
	}
	if answer.Error != "" {
		return fwk.NewStatus(fwk.Unschedulable, answer.Error)
	}
	held.annotations = answer.Annotations
	return nil
}

// Unreserve gives the chips back when the pod did not bind (a later plugin refused it, or the
// Binding failed).
func (pl *AscendNPU) Unreserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) {
	if _, err := read(state); err != nil {
		return
	}
	// The cycle's context may be done already; the give-back has its own deadline.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pl.client.Timeout)
	defer cancel()
	var answer reserveAnswer
	if err := pl.post(ctx, "unreserve", map[string]any{"Pod": pod, "Node": nodeName}, &answer); err != nil {
		klog.FromContext(ctx).Error(err, "unreserve", "pod", klog.KObj(pod), "node", nodeName)
	}
}

// Bind posts the Binding with the chips' annotations; Skip for a pod not ours, which the
// DefaultBinder after this plugin binds.
//
// One node's Bindings go out one at a time, each with predicate-time stamped just before it,
// as the service's own /bind writes them (scheduler_core/service/verbs/extender.py _give):
// the kubelet admits pods in the order their Bindings reach it, and the device plugin gives
// an Allocate the chips of the pending pod with the oldest predicate-time and its count.
// kube-scheduler binds in goroutines of their own, so two pods reserved on one node in turn
// could otherwise land in the other order, each to run on the chips the other records.
func (pl *AscendNPU) Bind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	held, err := read(state)
	if err != nil {
		return fwk.NewStatus(fwk.Skip)
	}
	annotations := make(map[string]string, len(held.annotations))
	for key, value := range held.annotations {
		annotations[key] = value
	}
	writing := pl.writing(nodeName)
	writing.Lock()
	defer writing.Unlock()
	if _, stamped := annotations[predicateTime]; stamped {
		annotations[predicateTime] = strconv.FormatInt(time.Now().UnixNano(), 10)
	}
	binding := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Annotations: annotations,
		},
		Target: v1.ObjectReference{Kind: "Node", Name: nodeName},
	}
	if err := pl.handle.ClientSet().CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fwk.AsStatus(err)
	}
	return nil
}

// writing is the node's lock for its Bindings (one a node, kept: a few bytes per node).
func (pl *AscendNPU) writing(node string) *sync.Mutex {
	lock, _ := pl.nodes.LoadOrStore(node, &sync.Mutex{})
	return lock.(*sync.Mutex)
}

func read(state fwk.CycleState) (*decision, error) {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil, err
	}
	held, ok := data.(*decision)
	if !ok {
		return nil, fmt.Errorf("%s: cycle state of type %T", Name, data)
	}
	return held, nil
}

// post sends one verb and decodes its JSON answer; a non-2xx status is an error with the
// service's message.
func (pl *AscendNPU) post(ctx context.Context, verb string, body any, into any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	request, err := http.NewRequestWithContext(ctx, http.MethodPost, pl.prefix+"/"+verb, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	request.Header.Set("Content-Type", "application/json")
	response, err := pl.client.Do(request)
	if err != nil {
		return fmt.Errorf("%s %s: %w", Name, verb, err)
	}
	defer response.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(response.Body, answerLimit))
	if err != nil {
		return fmt.Errorf("%s %s: %w", Name, verb, err)
	}
	if response.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", Name, verb, response.Status, bytes.TrimSpace(answer))
	}
	return json.Unmarshal(answer, into)
}
