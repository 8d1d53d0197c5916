"""Root-cause analysis benchmarks: GAT speed, the GAT test set, generator speed, learnability, PetShop sensitivity."""
