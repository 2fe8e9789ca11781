"""Replay viewer: ONE self-contained HTML file per run (no network, no external
scripts): the map on a canvas, agents and zombies moving step by step (slider and
play button), and a timeline of each agent's goals, strategies, progress ratings
and meta thoughts."""
from __future__ import annotations

import html
import json
import os
from typing import Any

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font:14px system-ui,sans-serif;margin:0;display:flex;gap:12px;padding:12px;background:#f6f6f2}
#left{flex:0 0 auto} #right{flex:1 1 auto;max-height:95vh;overflow:auto}
canvas{background:#fff;border:1px solid #999}
.agent{margin:6px 0;padding:6px;background:#fff;border:1px solid #ddd}
.ev{margin:2px 0 2px 8px;font-size:12px} .ev.cur{background:#ffeaa0}
.k-goal{color:#0a5} .k-strategy{color:#06c} .k-meta{color:#839} .k-progress{color:#b60} .k-reflection{color:#555}
.dead{opacity:.5;text-decoration:line-through}
#log{font-size:12px;white-space:pre-wrap;max-height:160px;overflow:auto;background:#fff;border:1px solid #ddd;padding:4px}
</style></head><body>
<div id="left"><h3>__TITLE__</h3>
<canvas id="map"></canvas><br>
<button id="play">play</button> step <input id="slider" type="range" min="0" value="0"> <span id="lbl"></span>
<div id="log"></div>
<div id="metrics"></div></div>
<div id="right"><h3>Agents: goals and meta thoughts</h3><div id="agents"></div></div>
<script id="run-data" type="application/json">__DATA__</script>
<script>
const D = JSON.parse(document.getElementById('run-data').textContent);
const W = D.world, S = 18, cv = document.getElementById('map'), cx = cv.getContext('2d');
cv.width = W.width * S; cv.height = W.height * S;
const colors = ['#e6194b','#3cb44b','#4363d8','#f58231','#911eb4','#42d4f4','#f032e6','#bfef45','#fabed4','#469990'];
const slider = document.getElementById('slider'); slider.max = D.frames.length - 1;
function draw(i){
  const f = D.frames[i]; cx.clearRect(0,0,cv.width,cv.height);
  cx.fillStyle='#eee'; W.locations.forEach(l=>{const b=l.bounds;
    cx.fillStyle = (W.zombie_free||[]).includes(l.name)?'#d8f5d0':'#f0ead8';
    cx.fillRect(b[0]*S,b[1]*S,(b[2]-b[0]+1)*S,(b[3]-b[1]+1)*S);
    cx.fillStyle='#776'; cx.font='10px sans-serif'; cx.fillText(l.name,b[0]*S+2,b[1]*S+10);});
  cx.fillStyle='#444'; W.walls.forEach(w=>cx.fillRect(w[0]*S,w[1]*S,S,S));
  cx.fillStyle='#c90'; W.objects.forEach(o=>cx.fillRect(o.pos[0]*S+6,o.pos[1]*S+6,6,6));
  f.bodies.forEach(b=>{cx.fillStyle='#000';cx.font='14px sans-serif';cx.fillText('x',b[1]*S+4,b[2]*S+13);});
  f.zombies.forEach(z=>{cx.fillStyle='#2a2';cx.beginPath();cx.arc(z[0]*S+S/2,z[1]*S+S/2,S/2-2,0,7);cx.fill();});
  f.agents.forEach((a,k)=>{ if(!a.alive) return; cx.fillStyle=colors[k%colors.length];
    cx.beginPath();cx.arc(a.x*S+S/2,a.y*S+S/2,S/2-1,0,7);cx.fill();
    cx.fillStyle='#000';cx.font='bold 11px sans-serif';cx.fillText(a.name,a.x*S+S,a.y*S+S/2);});
  document.getElementById('lbl').textContent = 'step '+f.step+' ('+f.clock+')';
  document.getElementById('log').textContent = f.events.map(e=>e.agent+' ['+e.kind+'] '+e.text).join('\\n');
  document.querySelectorAll('.ev').forEach(el=>el.classList.toggle('cur', +el.dataset.step===f.step));
  f.agents.forEach((a,k)=>{const h=document.getElementById('ag'+k); if(h){h.className=a.alive?'':'dead';
    h.textContent=a.name+' ('+a.role+') - goal: '+(a.goal||'none')+' - doing: '+a.action;}});
}
const box = document.getElementById('agents');
D.agents.forEach((a,k)=>{const d=document.createElement('div'); d.className='agent';
  const h=document.createElement('b'); h.id='ag'+k; d.appendChild(h);
  a.timeline.forEach(e=>{const p=document.createElement('div'); p.className='ev k-'+e.kind; p.dataset.step=e.step+1;
    p.textContent='step '+(e.step+1)+' '+e.kind+': '+e.text; p.onclick=()=>{slider.value=Math.min(e.step+1,slider.max);draw(+slider.value);}; d.appendChild(p);});
  box.appendChild(d);});
document.getElementById('metrics').textContent = JSON.stringify(D.metrics);
slider.oninput = ()=>draw(+slider.value);
let timer=null; document.getElementById('play').onclick=()=>{ if(timer){clearInterval(timer);timer=null;return;}
  timer=setInterval(()=>{ if(+slider.value>=+slider.max){clearInterval(timer);timer=null;return;}
    slider.value=+slider.value+1; draw(+slider.value);}, 400); };
draw(0);
</script></body></html>
"""


def render_html(run: dict[str, Any], title: str | None = None) -> str:
    """The viewer page for a run document (the content of ``run.json``)."""
    keep = {k: run[k] for k in ("world", "frames", "agents", "metrics") if k in run}
    missing = [k for k in ("world", "frames", "agents") if k not in keep]
    if missing:
        raise ValueError(f"run: missing field(s) {missing} needed by the viewer")
    data = json.dumps(keep, separators=(",", ":")).replace("</", "<\\/")
    t = html.escape(title or f"{run.get('scenario', {}).get('name', 'run')} replay")
    return _PAGE.replace("__TITLE__", t).replace("__DATA__", data)


def write_viewer(run: dict[str, Any], path: str, title: str | None = None) -> str:
    """Write the viewer atomically to ``path``; returns the path."""
    page = render_html(run, title)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, path)
    return path
