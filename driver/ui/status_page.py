"""The status page (``GET /``): one self-contained HTML document.

It fetches ``/api/status`` every 2 s and redraws: the app, its uptime and last
restart; input rate and the three delays as inline SVG line charts over the
batches it holds (the last minutes); tables of batches, receivers, WAL logs and
Kafka lag. No external script, style or font.
"""

from __future__ import annotations

PAGE_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>walstream</title>
<style>
body{font-family:sans-serif;margin:1em 2em;color:#222}
h1{font-size:1.4em;margin-bottom:.2em}
h2{font-size:1.1em;margin:1.2em 0 .4em}
table{border-collapse:collapse;font-size:.9em}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}
th{background:#eee}
td.l,th.l{text-align:left}
tr.failed td{background:#fdd}
.charts{display:flex;flex-wrap:wrap;gap:1em}
.chart{border:1px solid #ccc;padding:4px}
.chart .t{font-size:.85em;font-weight:bold}
#err{color:#b00}
</style></head>
<body>
<h1>walstream <span id="app"></span></h1>
<div id="summary"></div><div id="err"></div>
<h2>Over the last batches</h2>
<div class="charts">
<div class="chart"><div class="t">Input rate (records/s)</div><svg id="c-rate"
 width="420" height="140"></svg></div>
<div class="chart"><div class="t">Scheduling delay (s)</div><svg id="c-sched"
 width="420" height="140"></svg></div>
<div class="chart"><div class="t">Processing delay (s)</div><svg id="c-proc"
 width="420" height="140"></svg></div>
<div class="chart"><div class="t">Total delay (s)</div><svg id="c-total"
 width="420" height="140"></svg></div>
</div>
<h2>Receivers</h2><table id="receivers"></table>
<h2>Batches</h2><table id="batches"></table>
<h2>Write-ahead logs</h2><table id="wal"></table>
<h2>Kafka lag</h2><table id="lag"></table>
<script>
"use strict";
function esc(s){return String(s).replace(/[&<>"']/g,function(c){
  return {"&":"&amp;","<":"&lt;",">":"&gt;","\\"":"&quot;","'":"&#39;"}[c];});}
function ts(ms){return ms>0?new Date(ms).toLocaleTimeString():"-";}
function tsm(ms){return ms>0?ts(ms)+" ."+String(ms%1000).padStart(3,"0"):"-";}
function sec(ms){return ms>=0?(ms/1000).toFixed(3):"-";}
function table(id,head,rows,cls){
  var h="<tr>"+head.map(function(x){return "<th class='l'>"+esc(x)+"</th>";}).join("")+"</tr>";
  rows.forEach(function(r,i){
    h+="<tr class='"+(cls?cls[i]:"")+"'>"+r.map(function(x){
      return "<td>"+esc(x)+"</td>";}).join("")+"</tr>";});
  if(!rows.length){h+="<tr><td colspan='"+head.length+"' class='l'>none</td></tr>";}
  document.getElementById(id).innerHTML=h;
}
function chart(id,pts){
  var svg=document.getElementById(id),w=420,h=140,p=34;
  if(!pts.length){svg.innerHTML="<text x='10' y='20' font-size='12'>no batches yet</text>";return;}
  var x0=pts[0][0],x1=pts[pts.length-1][0],ym=0;
  pts.forEach(function(q){ym=Math.max(ym,q[1]);});
  if(ym<=0){ym=1;} if(x1<=x0){x1=x0+1;}
  var d=pts.map(function(q,i){
    var x=p+(q[0]-x0)/(x1-x0)*(w-p-6),y=h-16-q[1]/ym*(h-26);
    return (i?"L":"M")+x.toFixed(1)+" "+y.toFixed(1);}).join(" ");
  svg.innerHTML="<line x1='"+p+"' y1='"+(h-16)+"' x2='"+(w-6)+"' y2='"+(h-16)+
    "' stroke='#999'/><line x1='"+p+"' y1='10' x2='"+p+"' y2='"+(h-16)+"' stroke='#999'/>"+
    "<text x='2' y='14' font-size='10'>"+esc(ym.toPrecision(3))+"</text>"+
    "<text x='"+p+"' y='"+(h-3)+"' font-size='10'>"+esc(ts(x0))+"</text>"+
    "<text x='"+(w-60)+"' y='"+(h-3)+"' font-size='10'>"+esc(ts(x1))+"</text>"+
    "<path d='"+d+"' fill='none' stroke='#2a6ebb' stroke-width='1.5'/>";
}
function render(s){
  document.getElementById("app").textContent=s.app_id;
  var r=s.restart,t=s.totals;
  var sm="uptime "+Math.round(s.uptime_seconds)+" s · batches completed "+
    t.batches_completed+", failed "+t.batches_failed+", waiting or running "+
    t.batches_unprocessed+" · records processed "+t.records_processed;
  if(r.restarted){sm+=" · restarted: replayed "+(r.replayed_events==null?"?":r.replayed_events)+
    " events in "+r.replay_seconds+" s, first batch after "+
    (r.first_batch_seconds==null?"(not yet)":r.first_batch_seconds+" s");}
  document.getElementById("summary").textContent=sm;
  var b=s.batches.filter(function(x){return x.time_ms>=Date.now()-600000;});
  var iv=s.batch_interval_ms||1000;
  chart("c-rate",b.map(function(x){return [x.time_ms,x.records*1000/iv];}));
  chart("c-sched",b.map(function(x){return [x.time_ms,Math.max(0,x.scheduling_delay_ms)/1000];}));
  chart("c-proc",b.map(function(x){return [x.time_ms,Math.max(0,x.processing_delay_ms)/1000];}));
  chart("c-total",b.map(function(x){return [x.time_ms,Math.max(0,x.total_delay_ms)/1000];}));
  table("receivers",["stream","name","state","host","executor","rate limit","last error",
    "error time"],s.receivers.map(function(x){return [x.stream,x.name,x.state,x.host,
    x.executor_id,x.rate_limit||"none",x.last_error,
    x.last_error_time?ts(x.last_error_time*1000):""];}));
  var last=s.batches.slice(-50).reverse();
  table("batches",["batch time","records","scheduling (s)","processing (s)","total (s)",
    "status","error"],last.map(function(x){return [tsm(x.time_ms),x.records,
    sec(x.scheduling_delay_ms),sec(x.processing_delay_ms),sec(x.total_delay_ms),x.status,
    x.error];}),last.map(function(x){return x.status;}));
  table("wal",["log","records written","bytes written","current topic",
    "clean threshold"],s.wal.map(function(x){return [x.name,x.records,x.bytes,
    x.last_topic,x.clean_threshold_ms>0?ts(x.clean_threshold_ms):"-"];}));
  table("lag",["topic","partition","lag"],s.kafka_lag.map(function(x){
    return [x.topic,x.partition,x.lag];}));
}
function tick(){
  fetch("api/status",{cache:"no-store"}).then(function(r){return r.json();})
    .then(function(s){document.getElementById("err").textContent="";render(s);})
    .catch(function(e){document.getElementById("err").textContent=
      "cannot reach the driver: "+e;});
}
tick(); setInterval(tick,2000);
</script>
</body></html>
"""
