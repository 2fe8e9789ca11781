# Probe behind results/scienceworld/fixes/gold_forms.json (issue 50): plays the gold path of the first
# variation of each given task and records, per step, whether the gold action is in the valid list and,
# when not, the valid actions sharing its verb. Usage: python gold_forms_probe.py 0,2,4 [train]
# (writes /tmp/gold_<split>_<first task>.json). The counts came from grounding.executable_form on these records.
import json, sys
from metacog_fast.envs import make_env
out=[]
tasks=[int(x) for x in sys.argv[1].split(',')]
split=sys.argv[2] if len(sys.argv)>2 else 'train'
for t in tasks:
  try:
      env=make_env("scienceworld", task=t, split=split, step_limit=100000)
      v=env.variations[0]
      obs,info=env.reset(variation=v)
      gold=env.gold_path
      steps=[]
      for k,a in enumerate(gold):
          valid=list(info["admissible"])
          ok=a in valid
          rec={"k":k,"gold":a,"adm":ok,"obs":obs[:400]}
          if not ok:
              w=a.split()
              rec["near"]=[x for x in valid if x.split()[0]==w[0]]
          steps.append(rec)
          obs,r,d,info=env.step(a)
          if d: break
      out.append({"desc":env._task_desc,"task":t,"name":env.task,"var":v,"score":info["score"],"steps":steps,"valid_n":len(valid)})
      env.close()
      print(t, env.task, len(gold), sum(not s["adm"] for s in steps), info["score"], flush=True)
  except Exception as e: print(t,"ERR",e,flush=True)
json.dump(out,open(f"/tmp/gold_{split}_{tasks[0]}.json","w"))
