import torch

raise RuntimeError("boom while importing the program file")
