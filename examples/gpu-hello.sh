#!/bin/bash
# An ordinary Slurm batch script: gpud reads the #SBATCH lines unchanged and
# its own #GPU lines (command-line flags win over both).
#SBATCH --job-name=gpu-hello
#SBATCH --gpus-per-node=2
#SBATCH --cpus-per-task=2
#SBATCH --mem=1G
#GPU --time=1
#GPU --output=gpu-hello-%j.out

echo "job ${SLURM_JOB_ID} (${SLURM_JOB_NAME}) on $(hostname) as $(id -un)"
echo "GPUs: CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES}"
echo "GPU device nodes: $(ls /dev | grep -E '^nvidia' | tr '\n' ' ')"
for step in 1 2 3; do
	echo "training step ${step}/3"
	sleep 2
done
echo "done"
