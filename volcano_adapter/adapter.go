/*
Copyright 2025 The ascend-npu-k8s Authors.

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

// Package main is ascend-npu-adapter: a Volcano scheduler plugin built as a Go plugin
// (-buildmode=plugin) and loaded by vc-scheduler's --plugins-dir, as Huawei ships its
// volcano-npu_<version>.so. Volcano registers a loaded plugin under its file's name
// (pkg/scheduler/framework/plugins.go LoadCustomPlugins: the .so's stem, its symbol New of
// type framework.PluginBuilder), so the file must be ascend-npu-adapter.so and the tier
// entry `- name: ascend-npu-adapter`.
//
// It decides nothing. Volcano's stock extender plugin (pkg/scheduler/plugins/extender/
// extender.go) posts predicate once per task AND node; this adapter asks the scheduler
// service once per task for every node of the session (POST <urlPrefix>/predicateAll) and
// answers Volcano's predicate and node-order calls from that answer until an allocation
// or deallocation in the session (which changes other tasks' answers) makes it stale. An
// allocation asks the service for the chips (allocateCarried: chosen and held, nothing
// written) and puts the answered annotations on Volcano's copy of the pod, which its binder
// sends in the Binding, as Huawei's plugin has its chips carried; deallocateFunc and
// jobEnqueueable are posted as the extender plugin of Volcano v1.15.0 posts them (v1.12.0's
// has no event handler, so it binds NPU pods without chips). Volcano's scheduler account
// must be the one the chart's annotation policy lets carry our annotations in a Binding
// (value volcano.schedulerAccount). The state kept is the session's cached answers and
// carried annotations: Volcano builds a new plugin for every session
// (framework.OpenSession calls the builder per tier entry).
//
// Arguments (the tier entry's):
//
//	urlPrefix: https://volcano:<token>@ascend-npu-scheduler.kube-system.svc:8888/volcano
//	httpTimeout: 5s
//	managedResources: [huawei.com/Ascend910, ...]   (a list, or one comma-separated string)
//
// The token is the URL's userinfo: Go's http.Client sends it as HTTP Basic (net/http
// client.go), as it does for the extender entry.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins/util"
)

// PluginName is the name Volcano knows the plugin by: the .so file's stem.
var PluginName = "ascend-npu-adapter"

const (
	argURLPrefix        = "urlPrefix"
	argHTTPTimeout      = "httpTimeout"
	argManagedResources = "managedResources"

	verbPredicateAll   = "predicateAll"
	verbAllocate       = "allocateCarried"
	verbDeallocate     = "deallocateFunc"
	verbJobEnqueueable = "jobEnqueueable"

	defaultTimeout = 5 * time.Second
	maxAnswer      = 64 << 20 // bytes of one answer read at most
)

// Volcano's fit codes (pkg/scheduler/api: Unschedulable, UnschedulableAndUnresolvable):
// preempt and reclaim skip a node answered 3.
const (
	codeUnschedulable = api.Unschedulable
	codeUnresolvable  = api.UnschedulableAndUnresolvable
)

// One transport for every session's plugin: its kept-alive (TLS) connections outlive a
// session, as the extender plugin's http.Client does not.
var transport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return t
}()

type config struct {
	urlPrefix string
	timeout   time.Duration
	managed   map[string]bool // empty: every task
}

// predicateAllRequest is the batch verb's body: the task as the extender plugin sends it
// (Volcano's TaskInfo, Go field names) and the names of the session's nodes.
type predicateAllRequest struct {
	Task  *api.TaskInfo `json:"task"`
	Nodes []string      `json:"nodes"`
}

// predicateAllResponse is the service's answer (scheduler_core/service/verbs/volcano.py
// PredicateAllResponse): nodes passing, failing (code 2), never fitting (code 3), and the
// passing nodes' scores.
type predicateAllResponse struct {
	Passing      []string           `json:"passing"`
	Failed       map[string]string  `json:"failed"`
	Unresolvable map[string]string  `json:"unresolvable"`
	Scores       map[string]float64 `json:"scores"`
}

// The shapes of the extender plugin's event and enqueue calls (v1.15.0
// pkg/scheduler/plugins/extender/argument.go EventHandlerRequest/Response,
// JobEnqueueableRequest/Response).
type taskRequest struct {
	Task *api.TaskInfo `json:"task"`
}

type eventResponse struct {
	ErrorMessage string `json:"errorMessage"`
}

// carriedResponse is allocateCarried's answer (scheduler_core/service/verbs/volcano.py
// CarriedResponse): an error, or the annotations the pod's Binding is to carry.
type carriedResponse struct {
	eventResponse
	Annotations map[string]string `json:"annotations"`
}

type jobRequest struct {
	Job *api.JobInfo `json:"job"`
}

type jobEnqueueableResponse struct {
	Status int `json:"status"`
}

// answer is one task's batch answer, fetched once however many of Volcano's predicate
// workers ask for it at the same time.
type answer struct {
	once    sync.Once
	passing map[string]bool
	result  predicateAllResponse
	err     error
}

type answerKey struct {
	task  api.TaskID
	epoch uint64
}

type adapter struct {
	config config
	client *http.Client
	nodes  []string // the session's node names

	mu      sync.Mutex
	epoch   uint64                           // raised by every allocation and deallocation of a managed task
	answers map[answerKey]*answer            // of the current epoch
	carried map[api.TaskID]map[string]string // the annotations put on each allocated task's pod
}

// New is the framework.PluginBuilder Volcano looks up in the .so.
func New(arguments framework.Arguments) framework.Plugin {
	cfg := parseConfig(arguments)
	klog.V(3).Infof("%s: the scheduler service at %s", PluginName, redacted(cfg.urlPrefix))
	return &adapter{
		config:  cfg,
		client:  &http.Client{Transport: transport, Timeout: cfg.timeout},
		answers: map[answerKey]*answer{},
		carried: map[api.TaskID]map[string]string{},
	}
}

func parseConfig(arguments framework.Arguments) config {
	cfg := config{timeout: defaultTimeout, managed: map[string]bool{}}
	cfg.urlPrefix, _ = arguments[argURLPrefix].(string)
	cfg.urlPrefix = strings.TrimRight(cfg.urlPrefix, "/")
	if text, _ := arguments[argHTTPTimeout].(string); text != "" {
		if timeout, err := time.ParseDuration(text); err == nil && timeout > 0 {
			cfg.timeout = timeout
		} else {
			klog.Errorf("%s: %s %q is no duration: %s kept", PluginName, argHTTPTimeout, text, cfg.timeout)
		}
	}
	// A list, as Volcano >= 1.13 decodes the extender's, or a comma-separated string, as
	// its argument's comment describes; read here without framework.Get, which stops the
	// scheduler on a value of another type.
	switch listed := arguments[argManagedResources].(type) {
	case string:
		for _, name := range strings.Split(listed, ",") {
			if name = strings.TrimSpace(name); name != "" {
				cfg.managed[name] = true
			}
		}
	case []interface{}:
		for _, item := range listed {
			if name, ok := item.(string); ok && name != "" {
				cfg.managed[name] = true
			}
		}
	case []string:
		for _, name := range listed {
			cfg.managed[name] = true
		}
	}
	return cfg
}

func (a *adapter) Name() string {
	return PluginName
}

func (a *adapter) OnSessionOpen(ssn *framework.Session) {
	a.nodes = make([]string, 0, len(ssn.Nodes))
	for name := range ssn.Nodes {
		a.nodes = append(a.nodes, name)
	}
	ssn.AddPredicateFn(a.Name(), a.predicate)
	ssn.AddBatchNodeOrderFn(a.Name(), a.nodeOrder)
	ssn.AddEventHandler(&framework.EventHandler{
		AllocateFunc:   a.allocate,
		DeallocateFunc: a.deallocate,
	})
	ssn.AddJobEnqueueableFn(a.Name(), a.jobEnqueueable)
}

func (a *adapter) OnSessionClose(*framework.Session) {
	a.mu.Lock()
	a.answers = nil
	a.mu.Unlock()
}

// predicate answers Volcano's predicate for one node from the task's batch answer.
func (a *adapter) predicate(task *api.TaskInfo, node *api.NodeInfo) error {
	if !a.interested(task) {
		return nil
	}
	found := a.answerFor(task)
	if found.err != nil {
		// As the extender plugin without ignorable: a fit error, never a pass.
		return api.NewFitError(task, node, found.err.Error())
	}
	if found.passing[node.Name] {
		return nil
	}
	if reason, never := found.result.Unresolvable[node.Name]; never {
		return api.NewFitErrWithStatus(task, node, &api.Status{Code: codeUnresolvable, Reason: reason, Plugin: PluginName})
	}
	reason, failed := found.result.Failed[node.Name]
	if !failed {
		reason = "not in the scheduler service's answer for this session"
	}
	return api.NewFitErrWithStatus(task, node, &api.Status{Code: codeUnschedulable, Reason: reason, Plugin: PluginName})
}

// nodeOrder answers Volcano's batch node order: the cached scores of the nodes asked.
func (a *adapter) nodeOrder(task *api.TaskInfo, nodes []*api.NodeInfo) (map[string]float64, error) {
	scores := make(map[string]float64, len(nodes))
	if !a.interested(task) {
		return scores, nil
	}
	found := a.answerFor(task)
	if found.err != nil {
		return nil, found.err
	}
	for _, node := range nodes {
		if score, ok := found.result.Scores[node.Name]; ok {
			scores[node.Name] = score
		}
	}
	return scores, nil
}

// answerFor is the task's answer at the session's current epoch, fetched on first use.
func (a *adapter) answerFor(task *api.TaskInfo) *answer {
	a.mu.Lock()
	key := answerKey{task.UID, a.epoch}
	if a.answers == nil {
		a.answers = map[answerKey]*answer{}
	}
	found, ok := a.answers[key]
	if !ok {
		found = &answer{}
		a.answers[key] = found
	}
	a.mu.Unlock()
	found.once.Do(func() {
		found.err = a.post(verbPredicateAll, &predicateAllRequest{Task: task, Nodes: a.nodes}, &found.result)
		if found.err != nil {
			klog.Warningf("%s: %s for %s/%s: %v", PluginName, verbPredicateAll, task.Namespace, task.Name, found.err)
			return
		}
		found.passing = make(map[string]bool, len(found.result.Passing))
		for _, name := range found.result.Passing {
			found.passing[name] = true
		}
	})
	return found
}

// allocate asks the service for the task's chips on the node Volcano chose
// (allocateCarried: chosen and held there, nothing written) and puts the answered
// annotations on the session's copy of the pod: Volcano's binder sends every annotation of
// that copy in the pod's Binding (pkg/scheduler/cache/cache.go DefaultBinder.Bind), as
// Huawei's plugin has its chips carried. One write a pod, the Binding. A failed call or an
// errorMessage sets event.Err, and Volcano rolls the task back (as v1.15.0's extender
// plugin, extender.go addEventHandler).
func (a *adapter) allocate(event *framework.Event) {
	if event == nil || event.Task == nil || !a.interested(event.Task) {
		return
	}
	defer a.stale()
	response := &carriedResponse{}
	if !a.postEvent(verbAllocate, event, response, &response.eventResponse) {
		return
	}
	if len(response.Annotations) > 0 && event.Task.Pod != nil {
		// A copy: the informer's pod, which the session's task shares, stays as read.
		pod := event.Task.Pod.DeepCopy()
		if pod.Annotations == nil {
			pod.Annotations = make(map[string]string, len(response.Annotations))
		}
		for key, value := range response.Annotations {
			pod.Annotations[key] = value
		}
		event.Task.Pod = pod
		a.mu.Lock()
		a.carried[event.Task.UID] = response.Annotations
		a.mu.Unlock()
	}
}

// deallocate posts the task's leaving the session (its chips come back) and takes the
// annotations allocate put on its copy of the pod off again.
func (a *adapter) deallocate(event *framework.Event) {
	if event == nil || event.Task == nil || !a.interested(event.Task) {
		return
	}
	defer a.stale()
	a.mu.Lock()
	carried := a.carried[event.Task.UID]
	delete(a.carried, event.Task.UID)
	a.mu.Unlock()
	if len(carried) > 0 && event.Task.Pod != nil {
		pod := event.Task.Pod.DeepCopy()
		for key := range carried {
			delete(pod.Annotations, key)
		}
		event.Task.Pod = pod
	}
	response := &eventResponse{}
	a.postEvent(verbDeallocate, event, response, response)
}

// postEvent posts an event verb for the event's task into result; false, with event.Err set
// (Volcano then rolls the task back, as after v1.15.0's extender plugin), when the call
// failed or said (result's error part) carries an errorMessage.
func (a *adapter) postEvent(verb string, event *framework.Event, result interface{}, said *eventResponse) bool {
	if err := a.post(verb, &taskRequest{Task: event.Task}, result); err != nil {
		klog.Warningf("%s: %s for %s/%s: %v", PluginName, verb, event.Task.Namespace, event.Task.Name, err)
		event.Err = err
		return false
	}
	if said.ErrorMessage != "" {
		event.Err = errors.New(said.ErrorMessage)
		return false
	}
	return true
}

// stale raises the epoch and drops the answers of the earlier ones.
func (a *adapter) stale() {
	a.mu.Lock()
	a.epoch++
	a.answers = map[answerKey]*answer{}
	a.mu.Unlock()
}

// jobEnqueueable votes as the extender plugin's JobEnqueueableFn (extender.go, v1.12.0 and
// v1.15.0 alike): the service's status, Reject when the call fails.
func (a *adapter) jobEnqueueable(obj interface{}) int {
	job, ok := obj.(*api.JobInfo)
	if !ok {
		return util.Abstain
	}
	response := &jobEnqueueableResponse{}
	if err := a.post(verbJobEnqueueable, &jobRequest{Job: job}, response); err != nil {
		klog.Warningf("%s: %s for %s/%s: %v", PluginName, verbJobEnqueueable, job.Namespace, job.Name, err)
		return util.Reject
	}
	return response.Status
}

// interested: the task asks a managed resource (v1.15.0 extender.go IsInterested), or no
// resources are configured.
func (a *adapter) interested(task *api.TaskInfo) bool {
	if len(a.config.managed) == 0 {
		return true
	}
	if task.Pod == nil {
		return false
	}
	return a.asks(task.Pod.Spec.Containers) || a.asks(task.Pod.Spec.InitContainers)
}

func (a *adapter) asks(containers []corev1.Container) bool {
	for i := range containers {
		for _, list := range []corev1.ResourceList{containers[i].Resources.Requests, containers[i].Resources.Limits} {
			for name := range list {
				if a.config.managed[string(name)] {
					return true
				}
			}
		}
	}
	return false
}

// post sends one verb as the extender plugin's send does (extender.go): JSON over POST,
// an error unless the answer is 200.
func (a *adapter) post(verb string, body interface{}, result interface{}) error {
	out, err := json.Marshal(body)
	if err != nil {
		return err
	}
	request, err := http.NewRequest(http.MethodPost, a.config.urlPrefix+"/"+verb, bytes.NewReader(out))
	if err != nil {
		return err
	}
	request.Header.Set("Content-Type", "application/json")
	response, err := a.client.Do(request)
	if err != nil {
		return err
	}
	defer response.Body.Close()
	if response.StatusCode != http.StatusOK {
		said, _ := io.ReadAll(io.LimitReader(response.Body, 512))
		return fmt.Errorf("%s: HTTP %d: %s", verb, response.StatusCode, strings.TrimSpace(string(said)))
	}
	return json.NewDecoder(io.LimitReader(response.Body, maxAnswer)).Decode(result)
}

// redacted is the URL without its userinfo (the token), for the log.
func redacted(url string) string {
	scheme, rest, found := strings.Cut(url, "://")
	if !found {
		return url
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 && at < strings.IndexByte(rest+"/", '/') {
		rest = rest[at+1:]
	}
	return scheme + "://" + rest
}
