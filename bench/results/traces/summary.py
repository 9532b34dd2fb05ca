# Summary of a GDN_WYTC_TRACE csv (the diagnostics of commit 8fbef3a, since removed; cherry-pick it to record new traces): state segments, chunk segments, the state chain step of state block 0. Assumes segments of 128 chunks when the passes overlapped (the default segmentation up to 2048 chunks).
# usage: python3 bench/results/traces/summary.py trace.csv [...]   (gunzip the .csv.gz first)
import csv, sys, collections
def load(p):
    ch=[];st=[];cn=[]
    for r in csv.DictReader(open(p)):
        k=r['kind']; a=int(r['a']); b=int(r['b']); sm=int(r['sm']); s=int(r['start_ns']); e=int(r['end_ns'])
        if k=='chunk': ch.append((a,b,sm,s,e))
        elif k=='state': st.append((a,b,sm,s,e))
        else: cn.append((a,s))
    return ch,st,cn
for p in sys.argv[1:]:
    ch,st,cn=load(p)
    print('==',p, 'chunk blocks',len(ch),'state blocks',len(st))
    t_end=max([c[4] for c in ch]+[x[4] for x in st])
    print(' total span %.3f ms'%(t_end/1e6))
    segs=collections.defaultdict(list)
    for x in st: segs[x[0]].append(x)
    for sg in sorted(segs):
        xs=segs[sg]; s0=min(x[3] for x in xs); e0=max(x[4] for x in xs)
        sms=set(x[2] for x in xs)
        # chunk blocks overlapping this state window
        during=[c for c in ch if c[3]<e0 and c[4]>s0]
        on_state_sm=[c for c in during if c[2] in sms]
        print(' state seg %d: %.3f-%.3f ms (%.3f), %d blocks on %d SMs; chunk blocks running meanwhile %d, of which on state SMs %d'%(sg,s0/1e6,e0/1e6,(e0-s0)/1e6,len(xs),len(sms),len(during),len(on_state_sm)))
    # chunk blocks by chunk range (segments of 128 chunks)
    nc=max(c[0] for c in ch)+1
    seg=128 if len(segs)>1 else nc
    for i in range(0,nc,seg):
        cs=[c for c in ch if i<=c[0]<i+seg]
        s0=min(c[3] for c in cs); e0=max(c[4] for c in cs)
        d=sorted(c[4]-c[3] for c in cs)
        print(' chunks %d-%d: %.3f-%.3f ms (%.3f), block duration median %.1f us p90 %.1f us'%(i,i+seg-1,s0/1e6,e0/1e6,(e0-s0)/1e6,d[len(d)//2]/1e3,d[int(len(d)*.9)]/1e3))
    cn.sort()
    if len(cn)>2:
        steps=[(cn[i+1][1]-cn[i][1]) for i in range(len(cn)-1) if cn[i+1][0]==cn[i][0]+1]
        # per segment average step
        for i in range(0,nc,seg):
            ss=[cn[j+1][1]-cn[j][1] for j in range(len(cn)-1) if i<=cn[j][0]<i+seg-1 and cn[j+1][0]==cn[j][0]+1]
            if ss: print(' chain step chunks %d-%d: mean %.2f us, median %.2f us'%(i,i+seg-1,sum(ss)/len(ss)/1e3,sorted(ss)[len(ss)//2]/1e3))
