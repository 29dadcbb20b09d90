import torch


def model(x):
    return x.sin()
