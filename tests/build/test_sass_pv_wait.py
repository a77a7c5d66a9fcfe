#!/usr/bin/env python3
"""scripts/sass_pv_wait.py on a made-up listing: a kernel whose main loop waits for S, runs two exponentials, waits
for P V, runs one more, and branches back; it must read "2 / 3". A kernel without such a loop must not be listed."""
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "sass_pv_wait.py"
NAME = ("_ZN9flashattn7kernels27fwd_sm90_specialised_kernelINS0_13Sm90FwdTraitsI13__nv_bfloat16Li128ELi2ELNS0_12"
        "Sm90ScheduleE1ELi176ELi128EEELb0EEEv14CUtensorMap_stS6_S6_S6_NS_10AttnParamsEb")
LISTING = f"""
        Function : {NAME}
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   HGMMA.64x176x16.F32.BF16 R24, gdesc[UR20], RZ, !UPT ;
        /*0020*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0030*/                   MUFU.EX2 R3, R3 ;
        /*0040*/                   MUFU.EX2 R4, R4 ;
        /*0050*/              @!P5 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR14+0x34028], RZ ;
        /*0060*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0070*/                   MUFU.EX2 R5, R5 ;
        /*0080*/              @!P4 BRA 0x10 ;
        /*0090*/                   EXIT ;
        Function : _ZN9flashattn7kernels15other_kernelEv
        /*0000*/                   MUFU.EX2 R3, R3 ;
        /*0010*/                   EXIT ;
"""
out = subprocess.run([sys.executable, str(SCRIPT)], input=LISTING, capture_output=True, text=True, check=True).stdout
lines = out.strip().splitlines()
assert lines == ["bf16 hd128/128 2wg 176-key tiles: 2 / 3"], lines
print("ok")
