// The NPU map: polls /map/state and draws it. Every value from the state (pod, gang and
// node names, reasons) goes into the page as text (textContent, setAttribute) and never as
// markup: nothing a tenant names can become an element or a script.
"use strict";

const POLL_MS = 500;
const SVG = "http://www.w3.org/2000/svg";
const CHIP_R = 7;
let etag = "";

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  return node;
}

// One colour per holding pod, the same on every node; never a red, which means faulty.
function colour(holder) {
  if (!holder) return "#7d8896";
  let hash = 0;
  for (const c of holder) hash = (hash * 31 + c.charCodeAt(0)) >>> 0;
  return `hsl(${80 + (hash % 240)}, 55%, 40%)`;
}

// Where each chip of a group sits, and which pairs are linked: a ring (910's HCCS rings),
// a full mesh (910B), or a card of chips side by side (inference).
function shape(layout, count) {
  if (layout === "cards") {
    const at = [...Array(count).keys()].map((i) => [CHIP_R + 3 + i * 19, CHIP_R + 3]);
    const links = at.slice(1).map((_, i) => [i, i + 1]);
    return { at, links, width: count * 19 + 2, height: 2 * CHIP_R + 6, box: true };
  }
  const radius = count <= 4 ? 15 : 26;
  const centre = radius + CHIP_R + 2;
  const at = [...Array(count).keys()].map((i) => {
    const angle = (2 * Math.PI * i) / count - Math.PI * (count <= 4 ? 0.75 : 0.5);
    return [centre + radius * Math.cos(angle), centre + radius * Math.sin(angle)];
  });
  const links = [];
  for (let i = 0; i < count; i++) {
    if (layout === "mesh") for (let j = i + 1; j < count; j++) links.push([i, j]);
    else if (count > 1) links.push([i, (i + 1) % count]);
  }
  return { at, links, width: 2 * centre, height: 2 * centre, box: false };
}

function drawNode(node) {
  const box = el("div", node.sub_healthy ? "node sub-healthy" : "node");
  box.dataset.node = node.name;
  const head = el("div");
  head.append(el("span", "node-name", node.name), el("span", "node-product", node.product));
  box.append(head);
  const shapes = node.groups.map((group) => shape(node.layout, group.length));
  const width = shapes.reduce((sum, s) => sum + s.width + 6, 0);
  const height = Math.max(0, ...shapes.map((s) => s.height));
  const picture = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}` });
  picture.setAttribute("role", "img");
  let x = 0;
  node.groups.forEach((group, g) => {
    const s = shapes[g];
    const layer = svg("g", { transform: `translate(${x},0)` });
    if (s.box) layer.append(svg("rect", { class: "group-box", x: 1, y: 1, width: s.width - 2,
      height: s.height - 2, rx: 4 }));
    for (const [a, b] of s.links) {
      layer.append(svg("line", { class: "link", x1: s.at[a][0], y1: s.at[a][1],
        x2: s.at[b][0], y2: s.at[b][1] }));
    }
    group.forEach(([id, state, holder], i) => {
      const chip = svg("circle", { class: `chip ${state}`, cx: s.at[i][0], cy: s.at[i][1],
        r: CHIP_R });
      chip.dataset.chip = String(id);
      chip.dataset.state = state;
      if (state === "held") {
        chip.setAttribute("fill", colour(holder));
        chip.dataset.holder = holder;
      }
      const said = state === "held"
        ? `held by ${holder || "the scheduler (assumed or reserved)"}`
        : state;
      const title = svg("title", {});
      title.textContent = `${node.name} chip ${id}: ${said}`;
      chip.append(title);
      const label = svg("text", { class: state === "free" ? "chip-id" : "chip-id on-dark",
        x: s.at[i][0], y: s.at[i][1] });
      label.textContent = String(id);
      layer.append(chip, label);
    });
    picture.append(layer);
    x += s.width + 6;
  });
  box.append(picture);
  return box;
}

function drawCluster(state) {
  const main = document.getElementById("cluster");
  const pods = state.superpods.map((pod) => {
    const section = el("section", "superpod");
    section.dataset.superpod = pod.id === null ? "" : String(pod.id);
    section.append(el("h2", "", pod.id === null ? "Not in a SuperPoD" : `SuperPoD ${pod.id}`));
    const tors = el("div", "tors");
    for (const tor of pod.tors) {
      const box = el("div", "tor");
      box.dataset.tor = tor.id === null ? "" : String(tor.id);
      box.append(el("h3", "", tor.id === null ? "ToR not known" : `ToR ${tor.id}`));
      const nodes = el("div", "nodes");
      nodes.append(...tor.nodes.map(drawNode));
      box.append(nodes);
      tors.append(box);
    }
    section.append(tors);
    return section;
  });
  main.replaceChildren(...pods);
}

function drawList(section, list, items) {
  document.getElementById(section).hidden = items.length === 0;
  document.getElementById(list).replaceChildren(...items);
}

function draw(state) {
  drawCluster(state);
  drawList("gangs", "gang-list", state.gangs.map((gang) => {
    const item = el("li");
    item.dataset.gang = gang.name;
    item.append(
      el("span", "gang-name", gang.name),
      el("span", "", `: ${gang.missing} pods × ${gang.npu} chips (${gang.product}) to place, ` +
        `waiting ${gang.waiting_seconds} s: `),
      el("span", "gang-reason", gang.reason || "not tried yet"),
    );
    return item;
  }));
  drawList("left-out", "left-out-list", state.left_out.map((node) => {
    const item = el("li", "", `${node.name}: ${node.reason}`);
    item.dataset.node = node.name;
    return item;
  }));
  const counts = { free: 0, held: 0, faulty: 0 };
  let nodes = 0;
  for (const pod of state.superpods) {
    for (const tor of pod.tors) {
      nodes += tor.nodes.length;
      for (const node of tor.nodes) {
        for (const group of node.groups) for (const chip of group) counts[chip[1]] += 1;
      }
    }
  }
  const summary = document.getElementById("summary");
  summary.className = "";
  summary.textContent = `${nodes} nodes: ${counts.free} chips free, ${counts.held} held, ` +
    `${counts.faulty} faulty; ${state.gangs.length} waiting gang` +
    `${state.gangs.length === 1 ? "" : "s"} ` +
    `(${new Date().toLocaleTimeString()})`;
}

async function poll() {
  try {
    const answer = await fetch("/map/state", {
      cache: "no-store",
      credentials: "same-origin",
      headers: etag ? { "If-None-Match": etag } : {},
    });
    if (answer.status === 200) {
      const state = await answer.json();
      draw(state);
      etag = answer.headers.get("ETag") || "";
      document.body.dataset.version = etag;
    } else if (answer.status !== 304) {
      throw new Error(`the scheduler answered ${answer.status}`);
    }
  } catch (failed) {
    const summary = document.getElementById("summary");
    summary.className = "error";
    summary.textContent = `not updated: ${failed.message}`;
  }
  setTimeout(poll, POLL_MS);
}

poll();
